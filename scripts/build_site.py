#!/usr/bin/env python3
"""Build the course site: the lessons (modules/*.md), the class notebooks executed on the CPU
emulator with their outputs, the grader's command reference, and an index with the course map.

    python scripts/build_site.py [OUT_DIR] [--jobs N] [--timeout S] [--no-execute] [--no-html]

OUT_DIR defaults to build/site (open OUT_DIR/index.html). Everything generated goes to OUT_DIR and
to a work folder beside it, OUT_DIR-work/ (the staged sources, the executed notebooks, report.json,
the Sphinx warnings); nothing is written into the source tree. Sphinx reads its configuration from
site/conf.py.

Each notebook is executed exactly once, in its own Jupyter kernel (GRADER_BACKEND=cpu unless set,
the inline matplotlib backend so figures become image outputs), up to --jobs at a time. A notebook
that raises does not stop the build: its page shows the error, report.json records the cell and the
traceback, and the exit status is 1. Exit status 2: the site itself could not be built.

Links in the lessons to other files of the repository (`../exercises/02_flash_forward.py`) are not
pages of the site: they are rendered as the file's path in code font. Links to a lesson, a notebook
or the README stay links (the README becomes the index). A link to a file that does not exist is
left alone, and Sphinx's warning about it is recorded (tests/test_site.py requires none).

tests/conftest.py's `built_site` fixture runs this script once per test session and reads the
result with `SiteBuild` below: the executed notebooks, their errors, text and image outputs.
"""
from __future__ import annotations

import argparse
import base64
import concurrent.futures
import importlib.util
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE_SRC = ROOT / "site"
DEFAULT_OUT = ROOT / "build" / "site"
HTML_PACKAGES = ("sphinx", "myst_nb", "furo", "sphinx-mathjax-offline")
EXEC_PACKAGES = ("nbformat", "nbclient", "ipykernel")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def missing(packages) -> list[str]:
    return [p for p in packages if importlib.util.find_spec(p) is None]


class Pages:
    """What the site shows: every modules/*.md and every notebooks/*.ipynb (a course-wide notebook
    such as roofline too), the course's modules first in the catalogue's order, then the others."""

    def __init__(self):
        sys.path.insert(0, str(ROOT))
        from grader.catalogue import IDS
        self.course = IDS

        def ordered(names):
            return [i for i in IDS if i in names] + sorted(set(names) - set(IDS))
        self.lessons = ordered({p.stem for p in (ROOT / "modules").glob("*.md")})
        self.notebooks = ordered({p.stem for p in (ROOT / "notebooks").glob("*.ipynb")})
        self.paths = ({f"modules/{i}.md" for i in self.lessons}
                      | {f"notebooks/{i}.ipynb" for i in self.notebooks})


def work_dir_for(out_dir: Path) -> Path:
    return out_dir.with_name(out_dir.name + "-work")


# ---- executing the notebooks ---------------------------------------------------------------------

def kernel_env() -> dict[str, str]:
    env = dict(os.environ, GRADER_ROOT=str(ROOT), PYTHONUNBUFFERED="1")
    env.setdefault("GRADER_BACKEND", "cpu")
    # Not Agg: ipykernel's inline backend renders with Agg too (no display needed) and turns every
    # figure into an image output, which the site shows.
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    return env


def execute_one(src: Path, dest: Path, result: Path, timeout: int) -> int:
    """Child process: execute `src` in a fresh kernel, write it with its outputs to `dest` (also when
    a cell raised) and what happened to `result` (JSON)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(src, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(dest.parent)}})
    t0 = time.monotonic()
    error = None
    try:
        client.execute()
    except Exception as e:            # CellExecutionError, CellTimeoutError, DeadKernelError ...
        cell = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                     and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        msg = ANSI.sub("", str(e))
        if len(msg) > 8000:                  # keep the cell's source (first) and the error (last)
            msg = msg[:2500] + "\n[...]\n" + msg[-5000:]
        error = {"cell": cell, "type": type(e).__name__, "message": msg}
    seconds = time.monotonic() - t0
    nbformat.write(nb, dest)
    result.write_text(json.dumps({"seconds": round(seconds, 2), "error": error}))
    return 0


def execute_all(ids, src_dir: Path, dest_dir: Path, jobs: int, timeout: int) -> dict:
    """Execute every notebook once, `jobs` at a time, each in a child process of this script."""
    dest_dir.mkdir(parents=True, exist_ok=True)

    def run(ex_id):
        src, dest = src_dir / f"{ex_id}.ipynb", dest_dir / f"{ex_id}.ipynb"
        res = dest_dir / f"{ex_id}.result.json"
        res.unlink(missing_ok=True)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, __file__, "--execute-one", str(src), str(dest), str(res),
                            "--timeout", str(timeout)], env=kernel_env(), cwd=dest_dir,
                           capture_output=True, text=True)
        if p.returncode == 0 and res.is_file():
            r = json.loads(res.read_text())
            res.unlink()
        else:
            r = {"seconds": round(time.monotonic() - t0, 2),
                 "error": {"cell": None, "type": "ExecutorFailed",
                           "message": f"exit status {p.returncode}\n{p.stdout[-3000:]}{p.stderr[-3000:]}"}}
            if not dest.is_file():
                shutil.copyfile(src, dest)
        state = "ok" if r["error"] is None else f"FAILED ({r['error']['type']}, cell {r['error']['cell']})"
        print(f"  {ex_id}: {r['seconds']:.1f} s, {state}", flush=True)
        return ex_id, r

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(sorted(pool.map(run, ids)))


# ---- staging the sources -------------------------------------------------------------------------

LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+).+?\1")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def rewrite_links(text: str, rel_dir: str, pages: set[str], assets: set[str]) -> str:
    """Rewrite the Markdown links of a file at ROOT/rel_dir/ for the site (see the module docstring).
    `pages`: the repository paths that are pages of the site. Images that exist are added to
    `assets` (repository-relative paths) and copied by the caller."""

    def fix(m):
        bang, label, target = m.group(1), m.group(2), m.group(3)
        if SCHEME.match(target) or target.startswith(("#", "/")):
            return m.group(0)
        path, _, frag = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(rel_dir, path))
        full = ROOT / repo_path
        if repo_path.startswith("..") or not full.exists():
            return m.group(0)                  # broken in the repository too: let Sphinx report it
        if bang:
            assets.add(repo_path)
            return m.group(0)
        if repo_path in pages:
            return m.group(0)                  # staged at the same relative place
        if repo_path == "README.md":
            return f"[{label}]({posixpath.relpath('index.md', rel_dir)})"
        shown = label.strip().strip("`")
        if shown in (repo_path, path, posixpath.basename(repo_path)):
            return f"`{repo_path}`"
        return f"{label} (`{repo_path}`)"

    out, fence = [], None
    for line in text.splitlines(keepends=True):
        s = line.lstrip()
        if fence is None and s.startswith(("```", "~~~")):
            fence = s[:3]
        elif fence is not None:
            if s.startswith(fence):
                fence = None
        else:
            spans = [m.span() for m in CODE_SPAN.finditer(line)]
            line = LINK.sub(lambda m: m.group(0) if any(a <= m.start() < b for a, b in spans)
                            else fix(m), line)
        out.append(line)
    return "".join(out)


def readme_rows() -> dict[str, tuple[str, str]]:
    """The README's course table, {id: (module, you write)}; empty where the README has no row."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`\d\d_\w+`", cells[0]):
            rows[cells[0].strip("`")] = (cells[1], " | ".join(cells[2:]).replace("|", "\\|"))
    return rows


def course_map(pages: Pages) -> str:
    from grader.catalogue import BY_ID
    readme = readme_rows()
    lines = ["| id | lesson | you write | class notebook |", "|---|---|---|---|"]
    for i in pages.course:
        title, writes = readme.get(i, (BY_ID[i].title, ""))
        lesson = f"[{title}](modules/{i}.md)" if i in pages.lessons else title
        notebook = f"[notebook](notebooks/{i}.ipynb)" if i in pages.notebooks else ""
        lines.append(f"| `{i}` | {lesson} | {writes} | {notebook} |")
    others = [i for i in pages.notebooks if i not in pages.course]
    if others:
        lines += ["", "Notebooks about the whole course: "
                  + ", ".join(f"[{i}](notebooks/{i}.ipynb)" for i in others) + "."]
    toc = ["", "```{toctree}", ":caption: Lessons", ":maxdepth: 1", ":hidden:", "",
           *[f"modules/{i}" for i in pages.lessons], "```", "",
           "```{toctree}", ":caption: Class notebooks", ":maxdepth: 1", ":hidden:", "",
           *[f"notebooks/{i}" for i in pages.notebooks], "```", "",
           "```{toctree}", ":caption: Reference", ":maxdepth: 1", ":hidden:", "", "grader", "```", ""]
    return "\n".join(lines + toc)


def grader_reference() -> str:
    """The `grader` command's reference, from the argparse parser the CLI itself uses."""
    import argparse as ap
    os.environ["COLUMNS"] = "90"               # argparse wraps at the terminal's width: fit the page
    os.environ["NO_COLOR"] = "1"
    from grader.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, ap._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    md = ["# The grader command", "",
          "`grader` comes with the course (`pip install -e .` in your clone). This page is generated "
          "from the grader's own argument parser when the site is built, so it matches the code.", "",
          "| command | what it does |", "|---|---|"]
    md += [f"| [`grader {name}`](#grader-{name}) | {helps.get(name, '')} |" for name in sub.choices]
    md += ["", "````text", parser.format_help().rstrip(), "````", ""]
    for name, p in sub.choices.items():
        md += [f"## grader {name}", "", (helps.get(name) or p.description or "").rstrip(".") + ".", "",
               "````text", p.format_help().rstrip(), "````", ""]
    return "\n".join(md)


def stage(src: Path, pages: Pages, notebooks_dir: Path) -> None:
    """Lay out the Sphinx sources in `src`: site/ (but conf.py), the lessons, the notebooks, the
    generated pages. The repository's relative layout is kept (modules/, notebooks/)."""
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(SITE_SRC, src, ignore=shutil.ignore_patterns("conf.py", "__pycache__"))
    (src / "modules").mkdir()
    (src / "notebooks").mkdir()
    assets: set[str] = set()
    for i in pages.lessons:
        text = (ROOT / "modules" / f"{i}.md").read_text()
        (src / "modules" / f"{i}.md").write_text(rewrite_links(text, "modules", pages.paths, assets))
    for i in pages.notebooks:
        nb = json.loads((notebooks_dir / f"{i}.ipynb").read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                s = "".join(cell["source"])
                cell["source"] = rewrite_links(s, "notebooks", pages.paths, assets)
        (src / "notebooks" / f"{i}.ipynb").write_text(json.dumps(nb, indent=1))
    for a in sorted(assets):
        (src / a).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / a, src / a)
    gen = src / "_generated"
    gen.mkdir(exist_ok=True)
    (gen / "course_map.md").write_text(course_map(pages))
    (src / "grader.md").write_text(grader_reference())


def sphinx_build(src: Path, out: Path, work: Path) -> tuple[int, list[str], str]:
    warnings = work / "sphinx-warnings.txt"
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-c", str(SITE_SRC),
           "-d", str(work / "doctrees"), "-w", str(warnings), str(src), str(out)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = [ANSI.sub("", l) for l in warnings.read_text().splitlines()] if warnings.is_file() else []
    return p.returncode, [l for l in lines if l.strip()], p.stdout[-4000:] + p.stderr[-8000:]


def foreign(out: Path) -> bool:
    """Is `out` a folder with something else than a site built here (which we must not remove)?"""
    return out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / ".buildinfo").is_file()))


def build(out: Path, *, jobs: int, timeout: int, execute: bool = True, html: bool = True) -> int:
    out = out.resolve()
    work = work_dir_for(out)
    pages = Pages()
    ids = pages.notebooks
    t_start = time.monotonic()
    if html and foreign(out):
        print(f"build_site: {out} exists and is not a site built by this script; choose another OUT_DIR",
              file=sys.stderr)
        return 2
    need = missing(EXEC_PACKAGES) if execute else []
    need += missing(HTML_PACKAGES) if html else []
    if need:
        print(f"build_site: missing Python packages {', '.join(need)}: pip install -e '.[site]'",
              file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    (work / "report.json").unlink(missing_ok=True)
    executed_dir = work / "executed"
    report = {"out": str(out) if html else None, "work": str(work), "ids": list(ids),
              "executed": execute, "notebooks": {}, "seconds": {}}
    if execute:
        print(f"build_site: executing {len(ids)} notebooks, {jobs} at a time ...", flush=True)
        t0 = time.monotonic()
        report["notebooks"] = execute_all(ids, ROOT / "notebooks", executed_dir, jobs, timeout)
        report["seconds"]["execute"] = round(time.monotonic() - t0, 1)
    else:
        executed_dir.mkdir(exist_ok=True)
        for i in ids:
            shutil.copyfile(ROOT / "notebooks" / f"{i}.ipynb", executed_dir / f"{i}.ipynb")
    rc = 0
    if html:
        t0 = time.monotonic()
        stage(work / "src", pages, executed_dir)
        # Sphinx writes into work/html, moved to OUT_DIR when done: MyST-NB puts a jupyter_execute/
        # folder beside its output folder, and that belongs in the work folder.
        shutil.rmtree(work / "html", ignore_errors=True)
        status, warnings, output = sphinx_build(work / "src", work / "html", work)
        built = status == 0 and (work / "html" / "index.html").is_file()
        if built:
            shutil.rmtree(out, ignore_errors=True)
            shutil.move(work / "html", out)
        report["seconds"]["sphinx"] = round(time.monotonic() - t0, 1)
        report["warnings"] = warnings
        for w in warnings:
            print(f"  warning: {w}")
        if not built:
            report["out"] = None
            report["html_error"] = f"sphinx-build failed (exit status {status}):\n{output}"
            print(f"build_site: {report['html_error']}", file=sys.stderr)
            rc = 2
    report["seconds"]["total"] = round(time.monotonic() - t_start, 1)
    (work / "report.json").write_text(json.dumps(report, indent=1))
    failed = [i for i, r in report["notebooks"].items() if r["error"]]
    for i in failed:
        print(f"build_site: notebooks/{i}.ipynb raised:\n{report['notebooks'][i]['error']['message']}",
              file=sys.stderr)
    print(f"build_site: {report['seconds']}" + (f"; open {out / 'index.html'}" if html and rc == 0 else ""))
    return rc or (1 if failed else 0)


# ---- reading a build (tests/conftest.py's built_site fixture) -----------------------------------

class SiteBuild:
    """A finished build: `html` (the site's folder, or None when only the notebooks were executed or
    Sphinx failed, then `html_error` says why),
    and per notebook id: `executed(id)` (the nbformat notebook with its outputs), `error(id)` (None,
    or the failing cell and traceback as text), `text(id)` (every text output, one string) and
    `images(id)` (every image output)."""

    def __init__(self, work: Path):
        self.work = Path(work)
        self.report = json.loads((self.work / "report.json").read_text())
        self.html = Path(self.report["out"]) if self.report.get("out") else None
        self.warnings = self.report.get("warnings", [])
        self.html_error = self.report.get("html_error")       # Sphinx failed (the notebooks ran)

    @classmethod
    def load(cls, out_or_work: Path) -> "SiteBuild":
        p = Path(out_or_work)
        return cls(p if (p / "report.json").is_file() else work_dir_for(p.resolve()))

    def _id(self, ex_id: str) -> str:
        hits = [i for i in self.report["ids"] if i == ex_id or i.startswith(f"{ex_id}_")]
        if len(hits) != 1:
            raise KeyError(f"no notebook {ex_id!r}; the ids are {self.report['ids']}")
        return hits[0]

    def executed(self, ex_id: str):
        import nbformat
        return nbformat.read(self.work / "executed" / f"{self._id(ex_id)}.ipynb", as_version=4)

    def seconds(self, ex_id: str) -> float:
        return self.report["notebooks"][self._id(ex_id)]["seconds"]

    def error(self, ex_id: str) -> str | None:
        ex_id = self._id(ex_id)
        if not self.report["executed"]:
            return "the notebooks were not executed (build_site.py --no-execute)"
        e = self.report["notebooks"][ex_id]["error"]
        if e is None:
            return None
        where = f"cell {e['cell']}" if e["cell"] is not None else "a cell"
        return f"notebooks/{ex_id}.ipynb: {where} failed ({e['type']}):\n{e['message']}"

    def text(self, ex_id: str) -> str:
        """All text the notebook printed or displayed (streams, text/plain results, errors), in order."""
        parts = []
        for cell in self.executed(ex_id).cells:
            for o in cell.get("outputs", []):
                if o.output_type == "stream":
                    parts.append(o.text)
                elif o.output_type in ("execute_result", "display_data") and "text/plain" in o.data:
                    if not any(k.startswith("image/") for k in o.data):
                        parts.append(o.data["text/plain"])
                elif o.output_type == "error":
                    parts.append(ANSI.sub("", "\n".join(o.traceback)))
        return "\n".join(p.rstrip("\n") for p in parts)

    def images(self, ex_id: str) -> list[dict]:
        """Every image output: {"cell": index, "mime": "image/png", "data": bytes}."""
        out = []
        for n, cell in enumerate(self.executed(ex_id).cells):
            for o in cell.get("outputs", []):
                for mime, data in o.get("data", {}).items():
                    if mime.startswith("image/"):
                        raw = data.encode() if mime == "image/svg+xml" else base64.b64decode(data)
                        out.append({"cell": n, "mime": mime, "data": raw})
        return out

    def page(self, rel: str) -> Path:
        """The HTML file of a page, e.g. page("modules/02_flash_forward")."""
        return self.html / f"{rel}.html"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--execute-one"]:
        return execute_one(Path(argv[1]), Path(argv[2]), Path(argv[3]), int(argv[5]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="default: build/site")
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                    help="notebooks executed at the same time (default: the CPU count, at most 4)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds allowed per notebook cell")
    ap.add_argument("--no-execute", action="store_true",
                    help="show the notebooks without outputs (quick, for the layout)")
    ap.add_argument("--no-html", action="store_true", help="only execute the notebooks")
    a = ap.parse_args(argv)
    return build(a.out, jobs=a.jobs, timeout=a.timeout, execute=not a.no_execute, html=not a.no_html)


if __name__ == "__main__":
    raise SystemExit(main())
