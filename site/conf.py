"""Sphinx configuration of the course site. Do not run sphinx-build on this folder directly:
`python scripts/build_site.py [OUT_DIR]` stages the sources (lessons, executed notebooks, the
grader's command reference) into a work folder under build/ and builds from there with this file.
"""
import importlib.util
from pathlib import Path

project = "FlashAttention from scratch"
author = "the course authors"
copyright = "the course authors, MIT licence"

extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = ["_build", "_generated", "**.ipynb_checkpoints"]

# Markdown: $...$ and $$...$$ math as in the lessons, GitHub-style #anchors for headings.
smartquotes = False                  # `--backend` must stay two hyphens, in prose too
highlight_language = "text"          # a fence without a language is plain text (diagrams, commands)
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
myst_dmath_double_inline = True

# The notebooks are executed by scripts/build_site.py (each once, on the CPU emulator); Sphinx only
# renders the outputs stored in the staged copies.
nb_execution_mode = "off"
nb_merge_streams = True

# MathJax from a local copy (the site must render offline: no CDN). The PyPI package
# sphinx-mathjax-offline ships MathJax 3; we copy its files as static files and load the SVG
# output (which needs no web fonts, so math also renders from file:// URLs).
_spec = importlib.util.find_spec("sphinx-mathjax-offline")
if _spec is None or not _spec.submodule_search_locations:
    raise RuntimeError("the site needs MathJax from the PyPI package sphinx-mathjax-offline: "
                       "pip install -e '.[site]'")
_mathjax_static = Path(list(_spec.submodule_search_locations)[0]) / "static"
if not (_mathjax_static / "mathjax" / "tex-svg.js").is_file():
    raise RuntimeError(f"no mathjax/tex-svg.js in {_mathjax_static}: has sphinx-mathjax-offline changed?")
html_static_path = [str(_mathjax_static)]
mathjax_path = "mathjax/tex-svg.js"

html_theme = "furo"
html_title = "FlashAttention from scratch"
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None
