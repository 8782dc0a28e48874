# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's options against its argument spec, one message per mistake (controller only).

Pure functions over the parsed ``meta/argument_specs.yml`` and the option values; the type, choice and element
checks are Ansible's own (``ArgumentSpecValidator``), with the two mistakes its conversions hide checked first: YAML
reads an unquoted ``1.15`` as a number and ``yes`` as a boolean, which a ``str`` option would silently turn into
"1.15" and "True", and a plain string given for a ``list`` option would be split at its commas (or, read by a
template, iterated character by character).
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

# List options that also take a comma-separated string, as the software they configure writes it.
COMMA_STRINGS = {"volcano_scheduler_actions"}


def plain(value):
    """``value`` as plain Python data (dict, list, str, bool, int, float, None): Ansible hands templated values over
    as its own subclasses of these, which PyYAML's safe dumper, for one, refuses."""
    if isinstance(value, dict):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def spec_options(argument_specs, entry="main"):
    """The options of an entry point of a parsed meta/argument_specs.yml; ValueError when there are none."""
    try:
        options = argument_specs["argument_specs"][entry]["options"]
    except (KeyError, TypeError):
        raise ValueError("no options in meta/argument_specs.yml (argument_specs.%s.options)" % entry) from None
    if not isinstance(options, dict):
        raise ValueError("argument_specs.%s.options is not a mapping" % entry)
    return options


def without_defaults(options):
    """The options with every ``default`` removed (suboptions too): values are checked, defaults are not applied."""
    stripped = {}
    for name, spec in (options or {}).items():
        spec = {key: value for key, value in (spec or {}).items() if key != "default"}
        if "options" in spec:
            spec["options"] = without_defaults(spec["options"])
        stripped[name] = spec
    return stripped


def _show(value):
    return repr(value) if not isinstance(value, str) else "'%s'" % value


def yaml_mistakes(options, values, where=""):
    """Messages for values whose YAML type differs from the option's in a way Ansible's conversion would hide."""
    messages = []
    for name, spec in (options or {}).items():
        if name not in values or values[name] is None:
            continue
        value, kind, path = values[name], (spec or {}).get("type", "str"), where + name
        if kind == "str" and isinstance(value, bool):
            messages.append("%s is the boolean %s in YAML (yes/no/on/off/true/false are booleans); write it in "
                            "quotes if you mean the string" % (path, str(value).lower()))
        elif kind == "str" and isinstance(value, float):
            messages.append("%s is the number %r in YAML, not a version string; write it in quotes (\"%s\")"
                            % (path, value, value))
        elif kind == "list" and isinstance(value, str) and name not in COMMA_STRINGS:
            messages.append("%s must be a YAML list, got the string %s (write it as [%s] or one '- item' per "
                            "line)" % (path, _show(value), value))
        elif kind == "dict" and isinstance(value, (str, list)):
            messages.append("%s must be a YAML mapping (key: value), got %s %s"
                            % (path, "the string" if isinstance(value, str) else "the list", _show(value)))
        elif kind == "dict" and isinstance(value, dict) and spec.get("options"):
            messages.extend(yaml_mistakes(spec["options"], value, path + "."))
        elif (kind == "list" and isinstance(value, list) and spec.get("elements") == "dict"
              and spec.get("options")):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    messages.extend(yaml_mistakes(spec["options"], item, "%s[%d]." % (path, index)))
    return messages


def type_errors(options, values):
    """Ansible's own type, choice and element checks of the values (one message each, naming the option)."""
    result = ArgumentSpecValidator(without_defaults(options)).validate(dict(values))
    return list(dict.fromkeys(result.error_messages))


def check(options, values):
    """Every type mistake in ``values`` ({option: value}, the options' values as the role will see them): the YAML
    mistakes first; Ansible's checks only when there are none (they would report the same values again, worse)."""
    mistakes = yaml_mistakes(options, values)
    return mistakes or type_errors(options, values)
