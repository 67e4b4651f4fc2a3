#!/usr/bin/env python3
"""Validates an HTML report of conveyor::bench::html_report.

    report_html_check.py --sample EXE --ids a,b,c   # EXE FILE writes a report; check it
    report_html_check.py --file report.html --ids a,b,c

Checks: every element that is not void is closed, in order (html.parser); every top-level
<svg>...</svg> is well-formed XML (xml.etree.ElementTree); every number in the SVGs'
geometry is finite; nothing is fetched or run (no <script>, no src or href, no url() or
@import in styles); each expected id is on the page. Before that it checks itself: broken
pages must fail. Exit status 0 when the page passes, 1 with the problems listed otherwise.
"""
import argparse
import html.parser
import math
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SVG_NS = "http://www.w3.org/2000/svg"
GEOMETRY = {"x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height", "points", "viewBox", "d"}


class Page(html.parser.HTMLParser):
    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.stack = []
        self.problems = []
        self.ids = set()
        self.svgs = []  # (start offset, end offset) of each top-level <svg> element
        self.svg_start = None
        self.svg_depth = 0

    def position(self):
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def where(self):
        return "line %d" % self.getpos()[0]

    def note_attributes(self, tag, attrs):
        for name, value in attrs:
            if name == "id":
                self.ids.add(value)
            if name in ("src", "href", "xlink:href"):
                self.problems.append("%s: <%s %s=...> refers to something outside the page" % (self.where(), tag, name))
        if tag == "script":
            self.problems.append("%s: a <script>" % self.where())

    def handle_starttag(self, tag, attrs):
        self.note_attributes(tag, attrs)
        if tag in VOID:
            return
        if tag == "svg":
            if self.svg_depth == 0:
                self.svg_start = self.position()
            self.svg_depth += 1
        self.stack.append((tag, self.where()))

    def handle_startendtag(self, tag, attrs):
        self.note_attributes(tag, attrs)
        if tag not in VOID and self.svg_depth == 0:
            self.problems.append("%s: <%s/> self-closed outside SVG" % (self.where(), tag))

    def handle_endtag(self, tag):
        if tag in VOID:
            self.problems.append("%s: </%s> closes a void element" % (self.where(), tag))
            return
        if not self.stack:
            self.problems.append("%s: </%s> closes nothing" % (self.where(), tag))
            return
        opened, where = self.stack[-1]
        if opened != tag:
            self.problems.append("%s: </%s> closes <%s> opened at %s" % (self.where(), tag, opened, where))
            # Resynchronise on the nearest matching element, if any, so one slip is one problem.
            for i in range(len(self.stack) - 1, -1, -1):
                if self.stack[i][0] == tag:
                    del self.stack[i:]
                    break
            depth = sum(1 for t, _ in self.stack if t == "svg")
            if tag == "svg" and self.svg_depth > 0 and depth == 0:
                self.svgs.append((self.svg_start, self.text.index(">", self.position()) + 1))
            self.svg_depth = depth
            return
        self.stack.pop()
        if tag == "svg":
            self.svg_depth -= 1
            if self.svg_depth == 0:
                end = self.text.index(">", self.position()) + 1
                self.svgs.append((self.svg_start, end))

    def finish(self):
        self.close()
        for tag, where in self.stack:
            self.problems.append("<%s> opened at %s is never closed" % (tag, where))


def finite_numbers(name, value):
    """The problems with one geometry attribute's value (empty when every number is finite)."""
    if name in ("width", "height") and value.endswith("%"):
        value = value[:-1]
    tokens = re.split(r"[\s,]+|(?<=[0-9.])(?=[A-Za-z])|(?<=[A-Za-z])(?=[-+0-9.])", value.strip())
    problems = []
    for token in tokens:
        if not token or (name == "d" and re.fullmatch(r"[MmLlHhVvZz]", token)):
            continue
        try:
            number = float(token)
        except ValueError:
            problems.append("%s=%r: %r is not a number" % (name, value, token))
            continue
        if not math.isfinite(number):
            problems.append("%s=%r: %r is not finite" % (name, value, token))
    return problems


def check(text, expected_ids):
    """The problems of the page `text` (empty when it passes), and how many <svg> it has."""
    page = Page(text)
    page.feed(text)
    page.finish()
    problems = list(page.problems)
    if not text.lstrip().lower().startswith("<!doctype html>"):
        problems.append("the page does not start with <!DOCTYPE html>")
    for start, end in page.svgs:
        block = text[start:end]
        try:
            root = ET.fromstring(block)
        except ET.ParseError as e:
            problems.append("an <svg> at offset %d is not well-formed XML: %s" % (start, e))
            continue
        if root.tag != "{%s}svg" % SVG_NS:
            problems.append("an <svg> at offset %d lacks the SVG namespace" % start)
        for element in root.iter():
            for name, value in element.attrib.items():
                if name in GEOMETRY:
                    problems += ["<%s> %s" % (element.tag.split("}")[-1], p) for p in finite_numbers(name, value)]
        if re.search(r"\b(nan|inf|infinity)\b", "".join(root.itertext()), re.I):
            problems.append("an <svg> at offset %d shows NaN or inf as text" % start)
    # Text may name URLs (an S3 endpoint in the configuration); styles may not load any.
    for style in re.findall(r"<style[^>]*>(.*?)</style>|style=\"([^\"]*)\"", text, re.S):
        if re.search(r"url\(|@import", "".join(style)):
            problems.append("a style loads something: %r" % "".join(style)[:80])
    if not page.svgs and expected_ids:
        problems.append("no <svg> on the page")
    for i in expected_ids:
        if i not in page.ids:
            problems.append("no element with id %r" % i)
    return problems, len(page.svgs)


def self_test():
    """The checker must reject broken pages, or its passing means nothing."""
    good = ('<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>t</title></head><body>'
            '<figure id="a"><svg xmlns="%s" viewBox="0 0 10 10"><path d="M1 2V3h-5"/><rect x="1" y="2" width="3" height="4"/>'
            '<svg x="0" y="0" width="5" height="5"><circle cx="1" cy="1" r="2"><title>x</title></circle></svg></svg>'
            '<figcaption>c</figcaption></figure></body></html>\n' % SVG_NS)
    broken = {
        "an unclosed <div>": good.replace("<body>", "<body><div>"),
        "a stray </p>": good.replace("</figure>", "</figure></p>"),
        "misnested tags": good.replace("<figcaption>c</figcaption>", "<figcaption><b>c</figcaption></b>"),
        "an unclosed SVG element": good.replace('<rect x="1" y="2" width="3" height="4"/>', '<g><rect x="1" y="2" width="3" height="4"/>'),
        "an SVG that is not XML": good.replace('r="2"', "r=2"),
        "NaN in the geometry": good.replace('cx="1"', 'cx="nan"'),
        "inf in a path": good.replace("V3", "Vinf"),
        "a script": good.replace("<body>", "<body><script>1</script>"),
        "a missing id": good.replace('id="a"', 'id="b"'),
        "an external image": good.replace("<body>", '<body><img src="http://example.com/x.png">'),
        "a style that loads a font": good.replace("<title>t</title>", "<title>t</title><style>@import url(x.css);</style>"),
    }
    problems, _ = check(good, ["a"])
    if problems:
        sys.exit("report_html_check.py self-test: a good page fails: %s" % problems)
    for what, page in broken.items():
        if not check(page, ["a"])[0]:
            sys.exit("report_html_check.py self-test: a page with %s passes" % what)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sample", help="a program that writes a report to the file named by its argument")
    source.add_argument("--file", help="a report to check")
    parser.add_argument("--ids", default="", help="comma-separated ids that must be on the page")
    args = parser.parse_args()
    self_test()
    ids = [i for i in args.ids.split(",") if i]
    with tempfile.TemporaryDirectory(prefix="conveyor-report-") as tmp:
        path = args.file
        if args.sample:
            path = os.path.join(tmp, "not", "yet", "there", "report.html")  # write() makes the folders
            subprocess.run([args.sample, path], check=True)
        with open(path, encoding="utf-8") as f:
            text = f.read()
    problems, svgs = check(text, ids)
    if problems:
        print("%s: %d problem(s):" % (path, len(problems)))
        for p in problems:
            print("  " + p)
        return 1
    print("%s: %d bytes, %d SVG plots, ids %s present: ok" % (path, len(text), svgs, ", ".join(ids) or "(none asked)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
