"""Every relative link in the docs resolves: the file exists, and an anchor
(`#section`, or `FILE.md#section`) names a heading of the target, slugged as
GitHub does. Covers README.md, CONTRIBUTING.md, docs/*.md and every
client/**/README.md. No network: absolute URLs are not followed.
"""
import pathlib
import re

import pytest

pytestmark = pytest.mark.no_client  # reads markdown files

ROOT = pathlib.Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target), with an optional "title".
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files(root=ROOT):
    files = [root / "README.md", root / "CONTRIBUTING.md"]
    files += sorted((root / "docs").glob("*.md"))
    files += sorted((root / "client").glob("**/README.md"))
    return [f for f in files if f.is_file()]


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text: the rendered text (code spans,
    links and emphasis reduced to their text) lowercased, every character but
    letters, digits, '_', '-' and spaces dropped, spaces turned into '-'."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    """Every heading anchor of a markdown file, duplicates numbered -1, -2 as
    GitHub numbers them."""
    seen, result = {}, set()
    for _, line in prose_lines(path.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(path):
    """(line number, target) of every link in the prose of `path`."""
    for number, line in prose_lines(path.read_text()):
        definition = REFERENCE_DEF.match(line)
        if definition:
            yield number, definition.group(1)
            continue
        for match in INLINE_LINK.finditer(CODE_SPAN.sub("", line)):
            yield number, match.group(1)


def broken_links(path, root=ROOT):
    """Messages for the relative links of `path` that do not resolve."""
    problems, cache = [], {}
    for number, target in links(path):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # absolute URL: not followed
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
            continue
        if anchor and dest.suffix == ".md":
            if dest not in cache:
                cache[dest] = anchors(dest)
            if anchor not in cache[dest]:
                problems.append(f"{where}: no heading with anchor #{anchor}")
    return problems


def test_every_relative_link_and_anchor_resolves():
    files = doc_files()
    assert ROOT / "README.md" in files and ROOT / "docs" / "OPERATING.md" in files
    assert any(f.parent.name == "python" for f in files), files
    problems = [p for f in files for p in broken_links(f)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_check_sees_broken_links(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "OTHER.md").write_text("# Other\n\n## Real section (`x`)\n\n## Twice\n\n## Twice\n")
    (tmp_path / "README.md").write_text(
        "# Top\n\n"
        "[ok](docs/OTHER.md) [ok](docs/OTHER.md#real-section-x) [ok](#top)\n"
        "[ok](docs/OTHER.md#twice-1) [ok](https://example.com/nowhere.md)\n"
        "[missing file](docs/NOPE.md)\n"
        "[missing anchor](docs/OTHER.md#imaginary)\n"
        "[missing local anchor](#nowhere)\n"
        "`[in code](docs/NOPE2.md)`\n"
        "```\n[in a fence](docs/NOPE3.md)\n```\n"
        "[ref]: docs/NOPE4.md\n")
    problems = broken_links(tmp_path / "README.md", root=tmp_path)
    assert problems == [
        "README.md:5: docs/NOPE.md: no such file",
        "README.md:6: docs/OTHER.md#imaginary: no heading with anchor #imaginary",
        "README.md:7: #nowhere: no heading with anchor #nowhere",
        "README.md:12: docs/NOPE4.md: no such file",
    ], problems


@pytest.mark.parametrize("heading, expected", [
    ("Transport security (TLS and mTLS)", "transport-security-tls-and-mtls"),
    ("Python (`client/python`)", "python-clientpython"),
    ("Tensors as in TensorFlow (dtypes, conversions, the Python protocol)",
     "tensors-as-in-tensorflow-dtypes-conversions-the-python-protocol"),
    ("1. Recording path in-process (Google Benchmark)", "1-recording-path-in-process-google-benchmark"),
    ("Sizes: one checked rule (`core/tensor/tensor.h`, `CheckedTensorSize`)",
     "sizes-one-checked-rule-coretensortensorh-checkedtensorsize"),
    ("Where a Python op's time goes (issue 15)", "where-a-python-ops-time-goes-issue-15"),
    ("keep_dims and **bold**", "keep_dims-and-bold"),
])
def test_slugs_follow_github(heading, expected):
    assert slug(heading) == expected
