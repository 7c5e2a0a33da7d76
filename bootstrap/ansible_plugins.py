"""The Ansible plugins the shipped playbooks and roles use, and which of them this machine's Ansible resolves.

Modules (a task's key), lookups (``lookup``/``query``/``q``), filters and tests are collected from the YAML
(Jinja expressions parsed with Jinja's own parser, bare conditionals included) and the roles' templates;
filters and tests by their short names too, since nothing forces those to be fully qualified. The names are
then resolved by ansible-core's own plugin loader, with the collection paths ``ansible-playbook`` would
search, in a child process (the loader installs an import hook that is not this process's business).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml
from jinja2 import nodes

from bootstrap import resources

#: a fully qualified plugin name: namespace.collection.name
FQCN = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
#: task keywords whose value is a bare Jinja expression (no braces), or a list of them
_CONDITIONALS = {"when", "changed_when", "failed_when", "until", "that"}
#: lists of tasks inside a play or a block
_TASK_LISTS = {"tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"}
_LOOKUPS = {"lookup", "query", "q"}
#: a role's directories whose YAML Ansible templates (files/ is copied as it is; templates/ is Jinja whole)
_ROLE_YAML = ("tasks", "handlers", "defaults", "vars", "meta")
_JINJA = jinja2.Environment(autoescape=False, extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])  # noqa: S701 - parsed only, never rendered
#: what ansible-playbook would do with the names: resolve each with its plugin loader (run by ``unresolved``)
_RESOLVE = """
import json, sys
from jinja2.defaults import DEFAULT_FILTERS, DEFAULT_TESTS
from ansible import constants as C
from ansible.plugins.loader import filter_loader, init_plugin_loader, lookup_loader, module_loader, test_loader
init_plugin_loader(C.COLLECTIONS_PATHS)
def resolves(kind, name):
    if kind == "module":
        return module_loader.find_plugin_with_context(name).resolved
    if kind == "lookup":
        return lookup_loader.find_plugin_with_context(name).resolved
    if name in (DEFAULT_FILTERS if kind == "filter" else DEFAULT_TESTS):
        return True  # Jinja's own
    return (filter_loader if kind == "filter" else test_loader).get(name) is not None
def found(kind, name):
    try:
        return resolves(kind, name)
    except Exception:  # e.g. KeyError: a filter or test of a collection that is not installed
        return False
print(json.dumps([[k, n] for k, n in json.load(sys.stdin) if not found(k, n)]))
"""


class _Loader(yaml.SafeLoader):
    """YAML as Ansible reads it, for the scan: a tagged value (``!unsafe``, ``!vault``) is never templated."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


@dataclass(frozen=True, order=True)
class Plugin:
    """One plugin the shipped content names: its kind (module, lookup, filter, test) and name."""

    kind: str
    name: str

    @property
    def collection(self) -> str | None:
        """``namespace.collection`` of a fully qualified name, else None (a short name)."""
        return self.name.rsplit(".", 1)[0] if FQCN.match(self.name) else None


class UnreadableContent(Exception):
    """A shipped file that is not valid YAML or Jinja."""


def _expressions(value: Any, key: str | None = None) -> Iterator[str]:
    """Every Jinja source in a YAML value: templated strings, and bare conditionals wrapped in braces."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _expressions(v, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from _expressions(item, key)
    elif isinstance(value, str):
        if key in _CONDITIONALS and "{{" not in value and "{%" not in value:
            yield "{{ " + value + " }}"
        elif "{{" in value or "{%" in value:
            yield value


def _modules(value: Any) -> Iterator[str]:
    """The fully qualified names used as keys of tasks (and of plays: ``import_playbook``), blocks included."""
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                yield from (str(k) for k in item if FQCN.match(str(k)))
                for k, v in item.items():
                    if k in _TASK_LISTS:
                        yield from _modules(v)


def _jinja_plugins(source: str, where: Path) -> Iterator[Plugin]:
    try:
        with warnings.catch_warnings():  # backslash escapes of a regex in a string literal: Jinja warns, harmless here
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = _JINJA.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise UnreadableContent(f"{where}: {exc.message} in {source[:80]!r}") from None
    for node in tree.find_all((nodes.Filter, nodes.Test, nodes.Call)):
        if isinstance(node, nodes.Filter) and node.name:
            yield Plugin("filter", node.name)
        elif isinstance(node, nodes.Test):
            yield Plugin("test", node.name)
        elif (
            isinstance(node, nodes.Call)
            and isinstance(node.node, nodes.Name)
            and node.node.name in _LOOKUPS
            and node.args
            and isinstance(node.args[0], nodes.Const)
        ):
            yield Plugin("lookup", str(node.args[0].value))


def plugins_used(share: Path | None = None) -> set[Plugin]:
    """Every module, lookup, filter and test the shipped playbooks and roles name (their tests, such as the
    molecule scenarios, left out).

    Raises UnreadableContent when a shipped file does not parse.
    """
    base = share or resources.SHARE
    found: set[Plugin] = set()
    yaml_files = [*(base / "playbooks").rglob("*.yml")]
    yaml_files += [p for d in _ROLE_YAML for p in (base / "roles").glob(f"*/{d}/**/*.yml")]
    for path in sorted(yaml_files):
        try:
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - a SafeLoader
        except yaml.YAMLError as exc:
            raise UnreadableContent(f"{path}: {exc}") from None
        if path.parent.name in {"tasks", "handlers", "playbooks"}:
            found |= {Plugin("module", m) for m in _modules(data)}
        for source in _expressions(data):
            found |= set(_jinja_plugins(source, path))
    for path in sorted(p for p in (base / "roles").glob("*/templates/**/*") if p.is_file()):
        found |= set(_jinja_plugins(path.read_text(encoding="utf-8"), path))
    return found


def collections_used(share: Path | None = None) -> set[str]:
    """The collections (``namespace.name``) the shipped content names, ansible.builtin left out."""
    named = {p.collection for p in plugins_used(share)} - {None, "ansible.builtin", "ansible.legacy"}
    return {c for c in named if c is not None}


def unresolved(plugins: set[Plugin], python: str | None = None) -> list[Plugin]:
    """The plugins ansible-core (of ``python``, default this one) does not resolve on this machine.

    Raises RuntimeError when that Python cannot run ansible-core's loader (ansible-core missing or broken).
    """
    ask = json.dumps([[p.kind, p.name] for p in sorted(plugins)])
    proc = subprocess.run(
        [python or sys.executable, "-c", _RESOLVE],
        input=ask,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"ansible-core's plugin loader failed: {last}")
    return [Plugin(kind, name) for kind, name in json.loads(proc.stdout)]
