"""Load a callable named ``package.module:function`` (a description's functions, a pipeline's
drift features), putting the checkout root on ``sys.path`` first when asked to.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_REF_EXAMPLE = "'pipelines.<name>.steps:preprocess'"


class FunctionImportError(ValueError):
    """A ``package.module:function`` reference cannot be loaded; the message names the
    reference, what failed and the fix (it becomes the model's load error)."""


def load_function(ref: str, code_root: Path | None = None) -> Callable:
    """The callable named by ``ref`` (``"package.module:function"``; the part after ``:`` may
    be dotted, ``"module:Class.method"``).

    Args:
        ref: the reference, as in the description's ``preprocess.function``.
        code_root: a directory put at the front of ``sys.path`` (when not there yet) before
            importing, e.g. the checkout root so that ``pipelines.<name>.steps`` is found.

    Raises:
        FunctionImportError: ``ref`` is malformed (no ``:``, an empty side), ``code_root`` is
            not a directory, the module is not found or raises while importing, the attribute
            is missing, or it is not callable; the message names ``ref`` and says the fix.
    """
    module_name, sep, attr_path = ref.strip().partition(":")
    if not sep or not module_name or not attr_path or ":" in attr_path or " " in ref.strip():
        raise FunctionImportError(
            f"function reference {ref!r} is malformed: expected 'package.module:function', "
            f"e.g. {_REF_EXAMPLE}"
        )
    if code_root is not None:
        root = Path(code_root).resolve()
        if not root.is_dir():
            raise FunctionImportError(
                f"cannot load {ref!r}: code root {root} is not a directory; fix the step's "
                "'code_root' parameter (relative to the model's folder)"
            )
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    where = f"code root {Path(code_root).resolve()}" if code_root is not None else "sys.path"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and module_name != missing and not module_name.startswith(missing + "."):
            raise FunctionImportError(
                f"cannot load {ref!r}: importing module '{module_name}' failed because it "
                f"imports '{missing}', which is not installed ({exc}); install it in the "
                "Python backend's environment"
            ) from exc
        raise FunctionImportError(
            f"cannot load {ref!r}: module '{module_name}' not found (looked in {where}); check "
            "its spelling and that every package folder on the way has an __init__.py"
        ) from exc
    except Exception as exc:
        raise FunctionImportError(
            f"cannot load {ref!r}: importing module '{module_name}' raised {exc!r}; fix the "
            "module so that it imports cleanly"
        ) from exc
    target: Any = module
    for i, part in enumerate(attr_path.split(".")):
        if not hasattr(target, part):
            owner = module_name if i == 0 else f"{module_name}:{'.'.join(attr_path.split('.')[:i])}"
            names = [n for n in dir(target) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise FunctionImportError(
                f"cannot load {ref!r}: attribute '{part}' missing in '{owner}'{hint}; define "
                "it there or fix the reference"
            )
        target = getattr(target, part)
    if not callable(target):
        raise FunctionImportError(
            f"cannot load {ref!r}: it is a {type(target).__name__}, not callable; point the "
            "reference at a function taking a dict of numpy arrays"
        )
    return target
