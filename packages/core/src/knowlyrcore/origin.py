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
"""

from __future__ import annotations

from importlib import metadata

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
            raise ImportError(mismatch_message(required_by, expected, dist, found))
    return expected
