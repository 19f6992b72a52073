"""Great Expectations set up once per audit run, then every group's tables validated on it.

A :class:`SuiteRunner` imports GX, builds one ephemeral context with its pandas data source,
the seven suites of ``expectations/suites.py`` and one validation definition per table, once;
:meth:`SuiteRunner.validate` then validates a group's tables (each suite on its own DataFrame,
no checkpoint and no action per suite) and builds that group's Data Docs site once, from those
seven results. Before, each suite ran through a checkpoint of its own whose action rebuilt the
site: seven site builds per group (the step's own work 1.6 CPU s for one small group, now 0.6).

Most of the step is GX's import: what is kept out of it and deferred, and the thread that starts
it early (``pipeline.steps.run_pipeline``, during the Spark jobs), are
``expectations/gx_import.py``. Every
phase is timed (:attr:`SuiteRunner.timings_s`: import, context, suites, validation, docs; the
report adds reading the tables and publishing), as ``haproof bench overhead`` reports them.
"""

from __future__ import annotations

import time
from typing import Any

from expectations import suites
from expectations.gx_import import await_import

SITE = "haproof"
RESULT_FORMAT = {"result_format": "SUMMARY"}


class SuiteRunner:
    """One GX context with every suite, for every group of a run."""

    def __init__(self) -> None:
        self.timings_s: dict[str, float] = {}
        t0 = time.perf_counter()
        await_import()
        import great_expectations as gx
        import great_expectations.expectations as gxe
        from great_expectations.data_context.types.base import ProgressBarsConfig

        t1 = time.perf_counter()
        self._ctx = gx.get_context(mode="ephemeral")
        self._ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        source = self._ctx.data_sources.add_pandas("haproof_audit")
        t2 = time.perf_counter()
        self._definitions = {}
        for table, build in suites.BUILDERS.items():
            suite = self._ctx.suites.add(build(gx, gxe))
            batch = source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("run")
            self._definitions[table] = self._ctx.validation_definitions.add(
                gx.ValidationDefinition(data=batch, suite=suite, name=f"haproof-{table}")
            )
        t3 = time.perf_counter()
        self.timings_s = {"import": t1 - t0, "context": t2 - t1, "suites": t3 - t2}
        self._sites = 0

    def suite_name(self, table: str) -> str:
        return self._definitions[table].suite.name

    def validate(self, frames: dict[str, Any], run_name: str, parameters: dict[str, Any]):
        """Each table's suite on its frame: {table: ExpectationSuiteValidationResult}."""
        from great_expectations.core.run_identifier import RunIdentifier

        t0 = time.perf_counter()
        run_id = RunIdentifier(run_name=run_name)
        out = {
            table: vd.run(
                batch_parameters={"dataframe": frames[table]},
                expectation_parameters=parameters,
                result_format=RESULT_FORMAT,
                run_id=run_id,
            )
            for table, vd in self._definitions.items()
        }
        self.add("validation", time.perf_counter() - t0)
        return out

    def build_docs(self, docs_dir: str) -> None:
        """The Data Docs site of the last :meth:`validate` in ``docs_dir``, built once; the
        results are then dropped, so the next group's site shows only its own."""
        t0 = time.perf_counter()
        self._sites += 1
        name = f"{SITE}-{self._sites}"
        self._ctx.add_data_docs_site(
            site_name=name,
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": docs_dir,
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        try:
            self._ctx.build_data_docs(site_names=[name])
        finally:
            self._ctx.delete_data_docs_site(name)
            results = self._ctx.validation_results_store
            for key in results.list_keys():
                results.remove_key(key)
        self.add("docs", time.perf_counter() - t0)

    def add(self, phase: str, seconds: float) -> None:
        """Count ``seconds`` more in ``phase`` (the report adds reading and publishing)."""
        self.timings_s[phase] = self.timings_s.get(phase, 0.0) + seconds
