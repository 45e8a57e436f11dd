#!/usr/bin/env python3
"""Fails when a core/ file includes a layer above its own (core/CMakeLists.txt).

Usage: layers_test.py CORE_DIR [--self-test]

Every source file lives in a layer folder; `#include "core/<layer>/..."` is
allowed only for the file's own layer and the layers it may depend on.
core/ never includes gRPC, protobuf or the generated proto code.
"""
import os
import re
import sys

# Each layer and the layers it may include (its own is always allowed).
ALLOWED = {
    'base': set(),
    'tensor': {'base'},
    'registry': {'base', 'tensor'},
    'autodiff': {'base', 'tensor', 'registry'},
    'ops': {'base', 'tensor', 'registry', 'autodiff'},
    'session': {'base', 'tensor', 'registry', 'autodiff'},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
FORBIDDEN = re.compile(r'^(grpc|grpcpp|google/protobuf|proto/|server/|client/)')


def check_file(layer, path, text):
    errors = []
    for n, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        inc = m.group(1)
        where = f'{path}:{n}: includes {inc}'
        if FORBIDDEN.match(inc) or inc.endswith('.pb.h'):
            errors.append(f'{where}: core/ has no gRPC, protobuf or server code')
            continue
        if not inc.startswith('core/'):
            continue
        parts = inc.split('/')
        target = parts[1] if len(parts) > 2 else None
        if target not in ALLOWED:
            errors.append(f'{where}: not in a layer folder')
        elif target != layer and target not in ALLOWED[layer]:
            errors.append(f'{where}: layer {layer} may include only '
                          f'{sorted(ALLOWED[layer] | {layer})}')
    return errors


def check_tree(core_dir):
    errors = []
    checked = 0
    for root, _, files in os.walk(core_dir):
        for name in sorted(files):
            if not name.endswith(('.h', '.cc')):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, core_dir).split(os.sep)
            if len(rel) < 2 or rel[0] not in ALLOWED:
                errors.append(f'{path}: a core/ source outside the layer '
                              f'folders {sorted(ALLOWED)}')
                continue
            with open(path, encoding='utf-8') as f:
                errors += check_file(rel[0], path, f.read())
            checked += 1
    return errors, checked


def self_test():
    # The check itself must fail on the cases it exists for.
    assert check_file('tensor', 't.h', '#include "core/ops/ops.h"\n')
    assert check_file('registry', 'r.cc', '#include "core/autodiff/tape.h"\n')
    assert check_file('session', 's.cc', '#include "core/ops/ops.h"\n')
    assert check_file('ops', 'o.cc', '#include "core/session/session.h"\n')
    assert check_file('ops', 'o.cc', '#include <grpcpp/grpcpp.h>\n')
    assert check_file('ops', 'o.cc', '#include "proto/gradtape.pb.h"\n')
    assert check_file('ops', 'o.cc', '#include "core/tensor.h"\n')
    assert not check_file('ops', 'o.cc', '#include "core/autodiff/tape.h"\n')
    assert not check_file('session', 's.cc',
                          '#include "core/tensor/tensor.h"\n#include <vector>\n')


def main():
    self_test()
    errors, checked = check_tree(sys.argv[1])
    for e in errors:
        print(e)
    print(f'{checked} files checked, {len(errors)} layer violations')
    return 1 if errors or checked == 0 else 0


if __name__ == '__main__':
    sys.exit(main())
