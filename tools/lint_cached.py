#!/usr/bin/python3
"""Runs clang-tidy over the given .cpp files (paths relative to the checkout), skipping a file whose
exact translation unit was found clean before: the key is a hash of clang-tidy's version, the
.clang-tidy file and the file's preprocessed source (its compile command from
build/compile_commands.json with -E), so any change to the file, a header it includes or a
define re-lints it. Clean results are kept in $MOE_CACHE_DIR/lint (default ~/.cache/moeserve/lint),
as ccache keeps objects. Prints clang-tidy's findings; exits 1 if any file has one.
Usage: tools/lint_cached.py JOBS FILE...   (tools/lint.sh calls it)"""
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def cache_dir():
    base = os.environ.get("MOE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "moeserve")
    path = os.path.join(base, "lint")
    os.makedirs(path, exist_ok=True)
    return path


def preprocess_command(entry):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a.startswith("-o") and len(a) > 2:
            continue
        out.append(a)
    # -P: no line markers, so the key ignores where the checkout lies
    return out + ["-E", "-P"]


def key_of(root, entry, salt):
    pre = subprocess.run(preprocess_command(entry), cwd=entry["directory"], capture_output=True, check=False)
    if pre.returncode != 0:
        return None  # let clang-tidy report it
    text = pre.stdout.replace(root.encode(), b"@ROOT@")
    return hashlib.sha256(salt + text).hexdigest()


def lint(root, rel, entry, salt, cache):
    key = key_of(root, entry, salt)
    if key and os.path.exists(os.path.join(cache, key)):
        return rel, True, "", True
    tidy = subprocess.run(["clang-tidy", "-p", "build", "--quiet", rel], cwd=root, capture_output=True,
                          text=True, check=False)
    clean = tidy.returncode == 0
    if clean and key:
        open(os.path.join(cache, key), "w").close()
    return rel, clean, tidy.stdout + tidy.stderr, False


def main():
    jobs, files = int(sys.argv[1]), sys.argv[2:]
    root = os.getcwd()
    with open("build/compile_commands.json") as f:
        entries = {os.path.relpath(e["file"], root): e for e in json.load(f)}
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, check=True).stdout
    with open(".clang-tidy", "rb") as f:
        salt = version + f.read()
    cache = cache_dir()
    failed, hits = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for rel, clean, output, hit in pool.map(lambda r: lint(root, r, entries[r], salt, cache), files):
            hits += hit
            if not clean:
                failed.append(rel)
                for line in output.splitlines():
                    if ("warning:" in line or "error:" in line) and "warnings generated" not in line:
                        print(line)
    print(f"lint: {hits} of {len(files)} files unchanged since a clean check")
    if failed:
        print("lint: findings in " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
