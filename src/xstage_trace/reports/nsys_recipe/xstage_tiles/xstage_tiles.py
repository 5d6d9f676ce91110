"""``nsys recipe xstage_tiles``: the X-Stage tile-stall analysis as an Nsight Systems recipe.

Discovered through ``NSYS_RECIPE_PATH=$(xstage-trace nsys-recipe-path)``; runs inside the
recipe framework that ships with Nsight Systems (``nsys_recipe``), with xstage-trace installed in
that Python. Written against the framework's documented user-recipe interface (a ``Recipe``
subclass with an argument parser, a mapper run once per report and a reducer); all the work is
done by ``xstage_trace.reports.recipe``.
"""

from __future__ import annotations

from nsys_recipe.lib import recipe
from nsys_recipe.lib.args import Option

from xstage_trace.reports.recipe import map_report, reduce_results


class XstageTiles(recipe.Recipe):
    """Predicted vs measured MMA stall per configuration (docs/model.md §5) for every input report."""

    @staticmethod
    def _mapper_func(report_path, parsed_args, work_dir):
        return map_report(report_path, work_dir, dumps=parsed_args.dumps, calibration=parsed_args.calibration, nvtx=parsed_args.nvtx,
                          nvtx_domain=parsed_args.nvtx_domain, warmup_launches=parsed_args.warmup_launches)

    def mapper_func(self, context):
        work_dir = self.add_output_file("runs")  # one run folder + report per input report
        return context.wait(context.map(self._mapper_func, self._parsed_args.input, parsed_args=self._parsed_args, work_dir=work_dir))

    def reducer_func(self, mapper_res):
        reduce_results(list(mapper_res), self.add_output_file("xstage_verdicts.parquet"), self.add_output_file("xstage_summary.md"))

    def run(self, context):
        super().run(context)
        self.reducer_func(self.mapper_func(context))

    @classmethod
    def get_argument_parser(cls):
        parser = super().get_argument_parser()
        parser.add_recipe_argument(Option.INPUT, required=True)
        parser.add_recipe_argument("--dumps", default=None, help="folder of the probe dumps (default: each report's folder)")
        parser.add_recipe_argument("--calibration", default=None, help="calibration JSON (xstage-trace calibrate fit) for the burst audit")
        parser.add_recipe_argument("--nvtx", default=None, help="only kernels under NVTX ranges of this name or glob")
        parser.add_recipe_argument("--nvtx-domain", default=None, help="only ranges of this NVTX domain (name or glob), e.g. xstage")
        parser.add_recipe_argument("--warmup-launches", type=int, default=0, help="first launches of each configuration left out of its kernel-time trials")
        return parser
