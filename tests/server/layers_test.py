#!/usr/bin/env python3
"""Fails when a server/ file includes a server/ file above its own.

Usage: layers_test.py SERVER_DIR [--self-test]

server/'s modules (a module is NAME.h with NAME.cc) stand in ORDER, from
the bottom up; a module may include only modules before it in ORDER (and
its own header). So no include points back up and there are no cycles:

  1. plain pieces, no server/ includes: options, convert, memory_budget,
     access_log, metrics, api_keys, worker_pool;
  2. transport and observation: tls, rpc_observer;
  3. one batch, bottom up: result_cache, reply_budget, prediction,
     exactly_once, commands (one command), batch (the loop);
  4. sessions and the service: session_manager, drain, tape_service;
  5. the server, then the binary: server, main.

The gRPC metadata names live below all of them, in proto/ (included as
"gradtape/v1/metadata.h"). A server/ file never includes client/ or tests/
code, and every server/ source must be a module of ORDER (a new file gets
its place here).
"""
import os
import re
import sys

ORDER = [
    # 1. plain pieces
    'options', 'convert', 'memory_budget', 'access_log', 'metrics',
    'api_keys', 'worker_pool',
    # 2. transport and observation
    'tls', 'rpc_observer',
    # 3. one batch
    'result_cache', 'reply_budget', 'prediction', 'exactly_once', 'commands',
    'batch',
    # 4. sessions and the service
    'session_manager', 'drain', 'tape_service',
    # 5. the server and the binary
    'server', 'main',
]
RANK = {name: i for i, name in enumerate(ORDER)}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
FORBIDDEN = re.compile(r'^(client/|tests/|gradtape/client/)')
SERVER_HEADER = re.compile(r'^server/([a-z0-9_]+)\.h$')


def check_file(module, path, text):
    errors = []
    for n, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        inc = m.group(1)
        where = f'{path}:{n}: includes {inc}'
        if FORBIDDEN.match(inc):
            errors.append(f'{where}: server/ has no client or test code')
            continue
        if not inc.startswith('server/'):
            continue
        h = SERVER_HEADER.match(inc)
        target = h.group(1) if h else None
        if target not in RANK:
            errors.append(f'{where}: not a module of ORDER')
        elif target != module and RANK[target] > RANK[module]:
            errors.append(f'{where}: {target} stands above {module} '
                          f'(modules before {module}: '
                          f'{ORDER[:RANK[module]]})')
    return errors


def check_tree(server_dir):
    errors = []
    checked = 0
    for name in sorted(os.listdir(server_dir)):
        if not name.endswith(('.h', '.cc')):
            continue
        path = os.path.join(server_dir, name)
        module = name.rsplit('.', 1)[0]
        if module not in RANK:
            errors.append(f'{path}: not a module of ORDER {ORDER}')
            continue
        with open(path, encoding='utf-8') as f:
            errors += check_file(module, path, f.read())
        checked += 1
    return errors, checked


def self_test():
    # The check itself must fail on the cases it exists for.
    assert check_file('tls', 't.h', '#include "server/server.h"\n')
    assert check_file('rpc_observer', 'r.cc',
                      '#include "server/tape_service.h"\n')
    assert check_file('batch', 'b.cc', '#include "server/session_manager.h"\n')
    assert check_file('reply_budget', 'r.h', '#include "server/batch.h"\n')
    assert check_file('server', 's.cc', '#include "server/nowhere.h"\n')
    assert check_file('batch', 'b.cc', '#include "client/src/session.h"\n')
    assert not check_file('batch', 'b.cc',
                          '#include "server/batch.h"\n'
                          '#include "server/commands.h"\n'
                          '#include "gradtape/v1/metadata.h"\n'
                          '#include <vector>\n')
    assert not check_file('main', 'm.cc', '#include "server/server.h"\n')
    errors, _ = check_tree_of({'tls.h': '#include "server/server.h"\n',
                               'extra.cc': ''})
    assert len(errors) == 2, errors


def check_tree_of(files):
    """check_tree on a temporary directory holding `files`."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            with open(os.path.join(d, name), 'w', encoding='utf-8') as f:
                f.write(text)
        return check_tree(d)


def main():
    self_test()
    if sys.argv[1:] == ['--self-test']:
        print('self-test passed')
        return 0
    errors, checked = check_tree(sys.argv[1])
    for e in errors:
        print(e)
    print(f'{checked} files checked, {len(errors)} layer violations')
    return 1 if errors or checked == 0 else 0


if __name__ == '__main__':
    sys.exit(main())
