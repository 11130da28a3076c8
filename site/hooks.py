"""MkDocs hooks for the book's site (mkdocs.yml names this file).

The book has no index.md: its chapters are book/NN-name.md, and the first of
them (the introduction) is the home page. MkDocs would write it to
00-introduction.html and leave the site's root without a page, so this moves
it to index.html. Links to 00-introduction.md still resolve: MkDocs finds
a linked file by its source path, then uses the URL set here.
"""
import os


def on_files(files, config):
    pages = sorted((f for f in files.documentation_pages() if "/" not in f.src_uri), key=lambda f: f.src_uri)
    if not pages or any(f.name == "index" for f in pages):
        return files
    first = pages[0]
    first.dest_uri = "index.html"
    first.abs_dest_path = os.path.join(config["site_dir"], "index.html")
    first.url = "./" if config["use_directory_urls"] else "index.html"
    return files
