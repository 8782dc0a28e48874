"""Each role README's variable table, written from the role's meta/argument_specs.yml (`make docs`) and checked
against it (`make lint`): the argument spec is the one place an option is described, the README shows it.

usage: role_docs.py [--check] [ROLE_DIR ...]     (default: every roles/*/)
"""

import argparse
import difflib
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
BEGIN = ("<!-- BEGIN VARIABLES: written by `make docs` from meta/argument_specs.yml (edit the spec, then run it); "
         "`make lint` fails when this table differs -->")
END = "<!-- END VARIABLES -->"
ABSENT = object()

# Ansible's documentation markup (the argument spec's) as Markdown.
MARKUP = [
    (re.compile(r"L\(([^,()]+),\s*([^()]+)\)"), r"[\1](\2)"),
    (re.compile(r"U\(([^()]+)\)"), r"<\1>"),
    (re.compile(r"I\(([^()]+)\)"), r"*\1*"),
    (re.compile(r"B\(([^()]+)\)"), r"**\1**"),
    (re.compile(r"\b(?:C|O|V|RV|E|M)\(((?:[^()]|\([^()]*\))+)\)"), r"`\1`"),
]


def markup(text):
    for pattern, replacement in MARKUP:
        text = pattern.sub(replacement, text)
    return text


def cell(text):
    """One Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def description(option):
    text = option.get("description", "")
    return " ".join(text) if isinstance(text, list) else text


def show_default(value, required=False):
    if value is ABSENT:
        return "*required*" if required else ""
    if value == "":
        return '`""`'
    if isinstance(value, str):
        return "`%s`" % value.replace("`", "'")
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10 ** 6, sort_keys=False).strip()
    dumped = re.sub(r"\n\.\.\.$", "", dumped)
    return "`%s`" % dumped.replace("`", "'")


def rows(options, defaults, prefix="", entry=None):
    for name, option in (options or {}).items():
        full = prefix + name
        if "default" in option:
            default = option["default"]
        elif not prefix and name in defaults:
            default = defaults[name]
        else:
            default = ABSENT
        kind = option.get("type", "str")
        if kind == "list" and option.get("elements"):
            kind = "list of %s" % option["elements"]
        text = markup(description(option))
        if option.get("choices"):
            text += " One of: %s." % ", ".join("`%s`" % c for c in option["choices"])
        if entry:
            text += " (entry point `%s`)" % entry
        yield "| `%s` | %s | %s | %s |" % (full, cell(kind), cell(show_default(default, option.get("required"))),
                                           cell(text))
        if option.get("options"):
            yield from rows(option["options"], {}, full + ".", entry)


def table(role):
    """The Markdown table of every option of every entry point of `role` (a roles/<name> directory)."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults_file = role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.exists() else {}
    lines = ["| variable | type | default | description |", "|---|---|---|---|"]
    seen = set()
    for entry in ["main"] + sorted(e for e in specs if e != "main"):
        options = {k: v for k, v in ((specs.get(entry) or {}).get("options") or {}).items() if k not in seen}
        seen |= set(options)
        lines += rows(options, defaults, entry=None if entry == "main" else entry)
    return "\n".join(lines)


def render(readme, generated):
    """`readme` with the text between its markers replaced by `generated`; ValueError when they are missing."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError("no %s ... %s markers" % (BEGIN[:24], END))
    return readme[:start + len(BEGIN)] + "\n" + generated + "\n" + readme[end:]


def shown(path):
    """`path` from the repository root when it is in the repository."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report READMEs that differ; write nothing")
    parser.add_argument("roles", nargs="*", type=pathlib.Path)
    args = parser.parse_args(argv)
    roles = args.roles or sorted(p.parent.parent for p in (ROOT / "roles").glob("*/meta/argument_specs.yml"))
    stale = []
    for role in roles:
        path = role / "README.md"
        current = path.read_text()
        try:
            wanted = render(current, table(role))
        except ValueError as exc:
            print("%s: %s" % (shown(path), exc), file=sys.stderr)
            stale.append(path)
            continue
        if wanted == current:
            continue
        if args.check:
            stale.append(path)
            sys.stderr.writelines(difflib.unified_diff(current.splitlines(True), wanted.splitlines(True),
                                                       shown(path), "make docs"))
        else:
            path.write_text(wanted)
            print("wrote %s" % shown(path))
    if stale and args.check:
        print("%d role README(s) differ from their argument specs: run `make docs`" % len(stale), file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
