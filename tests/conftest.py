"""Shared pytest wiring: the one switch that rewrites golden files on purpose, and the
directory where content-keyed results are kept between runs."""

import gc
from pathlib import Path

import pytest


def pytest_configure(config):
    # A mocked program run builds tens of thousands of short-lived objects (the SDK's
    # outputs, futures and tasks); at the collector's default threshold (700) it is
    # traced thousands of times per run, about a tenth of the program-heavy modules' CPU.
    # What start-up and collection made is frozen out of every pass.
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()  # the collected modules and items live to the end


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/** from the current renderers instead of comparing",
    )


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def shellcheck_cache(request) -> Path | None:
    """Passing shellcheck runs kept by the hash of their input (tests/support/shellcheck.py);
    None when pytest's cache is off (`-p no:cacheprovider`): everything is checked."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("shellcheck")) if cache is not None else None


@pytest.fixture(scope="session")
def render_cache(request) -> Path | None:
    """The plan writer's renders kept by the hash of their inputs (offline/review.py
    `cached_render`): the review-diff tests and the plan CLI tests share them, and an
    unchanged tree is not rendered again in the next run (`pytest --cache-clear` empties
    it). None when pytest's cache is off: everything is rendered."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("review-renders")) if cache is not None else None


@pytest.fixture(scope="session")
def collection_cache(request) -> Path | None:
    """Outputs of `pytest --collect-only` runs kept by the hash of their inputs
    (tests/repo/test_daemon_order.py); None when pytest's cache is off: collected afresh."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("collections")) if cache is not None else None


# --- longest modules first ---------------------------------------------------------------
# `make check` spreads whole modules over the cores (xdist --dist loadscope: a module's
# fixtures are built once). A long module handed out last keeps one core busy while the
# other idles, so modules run longest first, by their seconds in the last run (pytest's
# cache; a module not seen yet keeps its place after the known ones).
MODULE_SECONDS = "gpu-cluster/module-seconds"


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):
    cache = getattr(config, "cache", None)
    seconds = cache.get(MODULE_SECONDS, {}) if cache is not None else {}
    if not seconds:
        return
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(_module(item.nodeid), i)
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda it: (-seconds.get(_module(it.nodeid), 0.0), first[_module(it.nodeid)], order[id(it)]))


_SPENT: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _SPENT[_module(report.nodeid)] = _SPENT.get(_module(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session):
    cache = getattr(session.config, "cache", None)
    if cache is None or hasattr(session.config, "workerinput") or not _SPENT:
        return  # an xdist worker: the controller saw every report and writes once
    cache.set(MODULE_SECONDS, {**cache.get(MODULE_SECONDS, {}), **{m: round(s, 2) for m, s in _SPENT.items()}})
