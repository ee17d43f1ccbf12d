#!/usr/bin/env python3
"""Every repository path, test and C++ name a README or doc names must exist (run in every `make build`).

Checked in the Markdown files of the repository:
- words that start with one of the top-level folders (src/, tests/, docs/, scripts/, bench/, python/,
  .ci/), and relative Markdown links: the path exists (a name may end in `:LINE` or `#anchor`; one with
  a wildcard or a placeholder such as `*`, `<` or `{` is skipped);
- a test file named alone (`test_auth.py`, `engine_test.cc`): some file of the repository has that name;
- `FILE.py::test_name`: that file defines the test;
- a qualified C++ name in backquotes (`http::serve_connection`): its last part is a word of a C++ file
  that opens that namespace or defines that class.
Build outputs (build/, the venvs) are not checked.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOP = ("src/", "tests/", "docs/", "scripts/", "bench/", "python/", ".ci/")
WORD = re.compile(r"(?<![\w./-])((?:%s)[\w./+-]*)" % "|".join(re.escape(t) for t in TOP))
LINK = re.compile(r"\]\(([^)\s]+)\)")
TEST_FILE = re.compile(r"(?<![\w/.-])((?:test_\w+\.py|\w+_test\.cc)(?:::\w+)?)")
CXX_NAME = re.compile(r"`((?:[a-z_][a-z0-9_]*::)+([A-Za-z_][A-Za-z0-9_]*))(?:\([^`]*\))?`")


def candidates(text):
    for m in WORD.finditer(text):
        yield m.group(1), None
    for m in LINK.finditer(text):
        yield m.group(1), "link"


def clean(name):
    name = name.split("::")[0].split("#")[0]
    name = re.sub(r":\d+(-\d+)?$", "", name)
    return name.rstrip(".,;:)")


def tracked(pattern):
    return subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split()


def named_elsewhere(line, by_name, words):
    """The test files, tests and C++ names a line names that the repository does not have."""
    for m in TEST_FILE.finditer(line):
        file, _, test = m.group(1).partition("::")
        paths = by_name.get(file, [])
        if not paths:
            yield m.group(1)
        elif test and not any(re.search(r"(def |\b)%s\b" % re.escape(test), (ROOT / p).read_text()) for p in paths):
            yield m.group(1)
    for m in CXX_NAME.finditer(line):
        space = m.group(1).split("::")[0]
        if space != "std" and m.group(2) not in words.get(space, ()):
            yield m.group(1)


def code_words():
    """The words of the C++ files that open each namespace or define each class, by its name."""
    words = {}
    for f in tracked("src/*") + tracked("tests/*"):
        if f.endswith((".cc", ".h")):
            text = (ROOT / f).read_text(errors="replace")
            found = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
            spaces = re.findall(r"namespace\s+([\w:]+)", text)
            spaces += re.findall(r"(?:class|struct|enum(?:\s+class)?)\s+(\w+(?:::\w+)*)\b(?!;)", text)
            for space in spaces:
                for part in space.split("::"):
                    words.setdefault(part, set()).update(found)
    return words


def main():
    files = tracked("*.md")
    by_name = {}
    for f in tracked("*"):
        by_name.setdefault(pathlib.PurePath(f).name, []).append(f)
    words = code_words()
    missing = []
    for f in files:
        doc = ROOT / f
        for lineno, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            missing += [f"{f}:{lineno}: {n}" for n in named_elsewhere(line, by_name, words)]
            for raw, kind in candidates(line):
                if kind == "link" and (re.match(r"^[a-z]+:", raw) or raw.startswith("#")):
                    continue
                name = clean(raw)
                if not name or any(ch in name for ch in "*<>{}$") or name.endswith("/."):
                    continue
                base = doc.parent if kind == "link" else ROOT
                if not (base / name).exists():
                    missing.append(f"{f}:{lineno}: {raw}")
    for m in missing:
        print(f"check_doc_paths: not in the repository: {m}", file=sys.stderr)
    if missing:
        print("check_doc_paths: a doc names a path, test or function the repository does not have; mend the doc",
              file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
