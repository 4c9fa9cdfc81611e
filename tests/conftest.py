"""Shared pytest configuration."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


@pytest.fixture(scope="session", autouse=True)
def torch_caches_in_pytest_temp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Importing ``torch.distributed.pipelining`` makes torch's inductor create ``torchinductor_<user>`` in the
    temporary folder (its cache directory): here it goes under pytest's own temporary folder, so the suite leaves no
    folder behind."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("torchinductor")))


@pytest.fixture(scope="session")
def gloo():
    """One gloo cluster of 8 processes (default layout sizes), started on first use and closed at the end of the
    session: shared by the training checks (a worker's first step imports torch's pipelining, the slow part), the main
    job's report (``tests/checks/test_layout_check.py``) and the real stream draws (``tests/test_streams.py``), each of
    which applies its own layout first."""
    from fastdist_lab import LocalCluster

    with LocalCluster(8, backend="gloo", timeout=90, progress=False) as cluster:
        yield cluster


# ---------------------------------------------------------------------------------------------------- the fast loop
SLOW_PATHS = (
    "notebooks/",  # every notebook, run cell by cell (nbval)
    "tests/e2e/",  # JupyterLab in a headless browser
    "tests/runtime/",  # worker processes, real process groups, simulated worlds
    "tests/checks/",  # checks on running clusters, training steps
    "tests/viz/",  # matplotlib pictures, rendered to pixels
    "tests/widgets/",  # ipywidgets panels, some with running clusters
    "tests/test_train_step_cli.py",
    "tests/test_count_guard.py",  # pytest sessions in subprocesses
    "tests/cost/test_schedules.py",  # every table against torch.distributed.pipelining's own schedule classes
    "tests/cost/test_search.py",  # whole searches, every row estimated again
    "tests/cost/test_search_cli.py",
    "tests/cost/test_search_bounds.py",  # whole searches that simulate every set-up
    "tests/exercises/test_cluster_checkers.py",  # the exercises' checks on running clusters
    "tests/cost/test_validation.py",  # the step time against every published run
    "tests/cost/test_validation_rankings.py",  # the same, and the published comparisons of layouts
    "tests/conventions/test_seeds_and_pictures.py",  # pictures
    "tests/setup/test_new_field.py",  # a copy of the package with one more field, driven in a fresh interpreter
)
"""Files (or folders) whose tests start processes, clusters, browsers or notebooks, draw pictures or drive torch's
own classes: ``slow``."""

SLOW_TESTS = {
    "tests/test_architecture.py": (
        "test_layers_contract_is_kept",  # import-linter in a subprocess (and once per broken copy)
        "test_an_upward_import_inside_a_function_breaks_the_contract",
        "test_an_unused_function_breaks_the_rule",  # a whole scan of a copy each
        "test_methods_called_by_python_ipython_or_a_framework_are_not_reported",
        "test_an_unused_function_named_elsewhere_still_breaks_the_rule",
        "test_a_function_used_through_an_import_of_the_package_is_used",
        "test_an_old_spelling_kept_for_one_release_is_not_reported",
        "test_a_name_leaking_into_a_subpackages_dir_breaks_the_rule",  # every subpackage imported in a subprocess
        "test_python_from_the_clones_parent_imports_the_installed_package",
        "test_every_public_namespace_dir_is_its_all",  # (tests/api/test_public_names.py holds every dir() too)
    ),
    "tests/api/test_public_names.py": ("test_a_name_removed_or_renamed_in_a_copy_of_the_package_breaks_the_list",),
    "tests/cost/test_cost_cli.py": (
        "test_cost_replay_runs_the_step_on_local_gloo_ranks",
        "test_cost_command_in_a_fresh_process",
    ),
    "tests/conventions/test_config_loaders.py": ("test_cli_bad_input_is_one_line_exit_2",),  # a process each
    "tests/conventions/test_config_fuzz.py": (  # 300 mutated configs (the quick loop reads 60, the CLI 3)
        "test_full_fuzz_of_the_published_configs",
        "test_full_fuzz_through_the_command_line",
    ),
    "tests/conventions/test_torchtitan_versions.py": ("test_every_mesh_name_matches_torch_numbering",),
    "tests/conventions/test_expert_streams.py": (  # a threaded world's real draws
        "test_real_draws_follow_each_rule_for_ranks_of_one_and_of_different_expert_ranks",
    ),
    "tests/test_streams.py": ("test_cli_streams_real",),  # (the tests on its running ``cluster`` fixture are slow too)
    "tests/test_cli.py": ("test_console_script_is_installed",),
    "tests/cost/test_fingerprints.py": (  # whole searches; the panels (ipywidgets) and every published run
        "test_searches_keep_their_fingerprints",
        "test_panels_keep_their_fingerprints",
    ),
    "tests/test_new_user.py": (
        "test_a_wrong_world_size_is_the_only_thing_said",
        "test_defaulted_sizes_are_named_when_they_are_the_problem",
    ),
}
"""Single slow tests (by function name) of files that are otherwise quick. Also slow: every test on a running
``cluster`` fixture, and the tests of ``tests/test_architecture.py`` that break a copy of the package (the rules
themselves, on the package, stay in the quick loop)."""


QUICK_EXAMPLES = 10
"""Hypothesis examples per property test in the quick loop (``-m "not slow"``); the whole suite runs its profile's."""


def pytest_configure(config: pytest.Config) -> None:
    """In the quick loop, property tests draw ``QUICK_EXAMPLES`` examples each (the whole suite, as CI runs it, keeps
    hypothesis' default number)."""
    if config.getoption("markexpr", "").replace(" ", "") == "notslow":
        settings.register_profile("quick", parent=settings.get_profile("default"), max_examples=QUICK_EXAMPLES)
        settings.load_profile("quick")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` what ``SLOW_PATHS`` and ``SLOW_TESTS`` name, so that ``python -m pytest -m "not slow"`` is the
    quick loop of pure tests (the whole suite, which CI runs, still runs everything)."""
    for item in items:
        path = item.path.relative_to(config.rootpath).as_posix()
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        fixtures = getattr(item, "fixturenames", ())
        if (
            path.startswith(SLOW_PATHS)
            or name in SLOW_TESTS.get(path, ())
            or "cluster" in fixtures  # a running cluster
            or (path == "tests/test_architecture.py" and "tmp_path" in fixtures)  # a broken copy of the package
        ):
            item.add_marker(pytest.mark.slow)
