"""Are the knowlyr packages next to this one ours, at our version?

The public index has unrelated packages with the same six names and the same import names
(``knowlyr-core`` 0.1.2 provides a ``knowlyrcore`` without ``Trajectory``). Ours are never
published: all six share one version carrying the local label ``+mono`` (PEP 440 forbids local
labels on public indexes) and pin each other to exactly that version, so pip cannot pick the
other project's package for a sibling. If one was installed anyway (``pip install knowlyr-hub``,
or an old environment), importing a knowlyr package fails with one line saying which package,
which version was found, which was expected and how to fix it, instead of an ``ImportError``
deep inside.

Each dependent package's ``__init__`` takes its ``__version__`` from ``check_siblings`` before
importing anything else; it checks knowlyr-core and every other knowlyr package installed next
to it. The other project's knowlyr-core has no ``knowlyrcore.origin``, so the ``__init__`` turns a
failing import of this module into a short ``ImportError`` naming the fix::

    try:
        from knowlyrcore.origin import check_siblings
    except ImportError as exc:  # the other project's knowlyr-core (PyPI) has no knowlyrcore.origin
        raise ImportError("knowlyr-hub needs knowlyr-core from the knowlyr checkout, ...") from exc

    __version__ = check_siblings("knowlyr-hub")  # ImportError if e.g. knowlyr-core 0.0.9+mono is installed

Only ``importlib.metadata`` is read: the check costs a few milliseconds per import and works the
same for editable installs, whose metadata carries the pyproject version too.

Nothing catching it, the ``ImportError`` ends the process with that one line alone, as
``error: <line>`` with exit code 2 (``exit_in_one_line``): a ``knowlyr-*`` command stopped by the
check prints no traceback. Code that catches ``ImportError`` gets it as before.

``install_command(dist, extra)`` is how every knowlyr message words installing a package or an
extra (``MissingExtraError``, the registry's hint): from the checkout or a wheelhouse, never the
bare PyPI name.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from types import TracebackType

#: Distribution name -> folder under ``packages/`` in the knowlyr checkout.
FOLDERS = {
    "knowlyr-core": "core",
    "knowlyr-sandbox": "sandbox",
    "knowlyr-recorder": "recorder",
    "knowlyr-reward": "reward",
    "knowlyr-hub": "hub",
    "knowlyr-trainer": "trainer",
}


def installed_version(dist: str) -> str | None:
    """The installed version of ``dist``, or None if it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def mismatch_message(required_by: str, expected: str, dist: str, found: str) -> str:
    """The one line an import fails with when ``dist`` is at ``found`` instead of ``expected``.

    Example:
        >>> print(mismatch_message("knowlyr-hub", "0.1.0+mono", "knowlyr-core", "0.1.2"))  # doctest: +NORMALIZE_WHITESPACE
        knowlyr-hub 0.1.0+mono needs knowlyr-core 0.1.0+mono, found knowlyr-core 0.1.2 (the knowlyr-* packages
        on PyPI are another project); fix: pip install ./packages/core from the knowlyr checkout, or
        pip install --no-index --find-links WHEELHOUSE knowlyr-core==0.1.0+mono (docs/install.md)
    """
    return (
        f"{required_by} {expected} needs {dist} {expected}, found {dist} {found} "
        "(the knowlyr-* packages on PyPI are another project); "
        f"fix: pip install ./packages/{FOLDERS[dist]} from the knowlyr checkout, "
        f"or pip install --no-index --find-links WHEELHOUSE {dist}=={expected} (docs/install.md)"
    )


def exit_in_one_line(error: BaseException) -> BaseException:
    """``error``, made to end the process as one ``error: <message>`` line on stderr, exit code 2
    (``knowlyrcore.clikit``: the user fixes it before running again), if nothing catches it.

    For an error raised at import: a console script importing its package prints no traceback.
    Only this error object is treated so (``sys.excepthook`` passes on every other one), and code
    that catches it sees nothing different.
    """
    previous = sys.excepthook

    def one_line(kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
        if value is not error:
            previous(kind, value, traceback)
            return
        print(f"error: {value}", file=sys.stderr)
        raise SystemExit(2)  # from an excepthook, Python exits with this code

    sys.excepthook = one_line
    return error


def _extra_siblings(dist: str, extra: str) -> list[str]:
    """The knowlyr packages other than ``dist`` that its ``extra`` requires (its installed metadata)."""
    try:
        requirements = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return []
    wanted = re.compile(r"""extra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    found = set()
    for requirement in requirements:
        name, _, marker = requirement.partition(";")
        name = re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~(]", name.strip(), maxsplit=1)[0]).lower()
        if name in FOLDERS and name != dist and wanted.search(marker):
            found.add(name)
    return [sibling for sibling in FOLDERS if sibling in found]


def install_command(dist: str, extra: str | None = None) -> str:
    """How to install ``dist`` (with ``extra``), as every knowlyr message words it.

    A knowlyr package: pip from the checkout or from a wheelhouse at the one version, never the
    bare name, which on PyPI is another project's (docs/install.md). From a checkout, an extra that
    brings a knowlyr sibling names the sibling's folder too (its pin is a version no index has):
    with knowlyr-hub installed, ``install_command("knowlyr-hub", "trainer")`` starts
    ``pip install ./packages/trainer './packages/hub[trainer]'``. Any other distribution:
    ``pip install 'dist[extra]'``.

    Example:
        >>> print(install_command("knowlyr-hub", "report"))  # doctest: +ELLIPSIS
        pip install './packages/hub[report]' from the knowlyr checkout, or pip install --find-links WHEELHOUSE 'knowlyr-hub[report]==...' (docs/install.md)
        >>> print(install_command("knowlyr-sandbox"))  # doctest: +ELLIPSIS
        pip install ./packages/sandbox from the knowlyr checkout, or pip install --find-links WHEELHOUSE knowlyr-sandbox==... (docs/install.md)
        >>> print(install_command("other-dist", "x"))
        pip install 'other-dist[x]'
    """
    wanted = f"{dist}[{extra}]" if extra else dist
    if dist not in FOLDERS:
        return f"pip install '{wanted}'" if extra else f"pip install {wanted}"
    path = f"./packages/{FOLDERS[dist]}"
    paths = [f"./packages/{FOLDERS[s]}" for s in _extra_siblings(dist, extra)] if extra else []
    paths.append(f"'{path}[{extra}]'" if extra else path)
    version = installed_version(dist) or installed_version("knowlyr-core")
    pinned = f"{wanted}=={version}" if version else wanted
    quoted = f"'{pinned}'" if extra else pinned
    return (
        f"pip install {' '.join(paths)} from the knowlyr checkout, "
        f"or pip install --find-links WHEELHOUSE {quoted} (docs/install.md)"
    )


def check_siblings(required_by: str) -> str:
    """``required_by``'s installed version, after checking that every knowlyr package installed
    next to it has that version too (``ImportError`` naming the fix if one has another).

    Every knowlyr package present is checked, not only declared ones: a package imports optional
    siblings lazily (knowlyr-hub's ``tasks`` imports knowlyr-sandbox), and registered
    environments load through entry points, so any of them can end up in the same process.
    Packages that are not installed are fine. knowlyr-core is checked first (``FOLDERS`` order):
    everything else is imported through it, so a wrong core is the one to name.
    """
    expected = metadata.version(required_by)
    for dist in FOLDERS:
        found = installed_version(dist)
        if dist != required_by and found is not None and found != expected:
            raise exit_in_one_line(ImportError(mismatch_message(required_by, expected, dist, found)))
    return expected
