"""The selftest's table: a row per check with its pill, figures and reason; the check under way last; lines for a terminal."""

from __future__ import annotations

from tpu_nb.selftest.report import CheckResult
from tpu_nb.selftest.table import line, table_html

PASSED = CheckResult(4, "dashboard", "tpu_nb's overhead", "passed", {"ratio": 0.98}, 12.3, None, None)
SKIPPED = CheckResult(5, "compile_cache", "the compile cache", "skipped", {}, 0.0, "XLA:CPU cannot load <cached> programs", None)


def test_each_result_is_a_row_with_its_figures_and_escaped_reason_and_the_running_check_last() -> None:
    markup = table_html([PASSED, SKIPPED], "6. the doctor", "CPU")
    assert markup.index("4. tpu_nb&#x27;s overhead") < markup.index("5. the compile cache") < markup.index("6. the doctor")
    assert "ratio 0.98" in markup and "12.3s" in markup
    assert "cannot load &lt;cached&gt; programs" in markup and "<cached>" not in markup
    assert ">running<" in markup and ">passed<" in markup and ">skipped<" in markup


def test_a_terminal_line_says_the_result_then_the_reason() -> None:
    assert line(PASSED) == "  4 dashboard      passed     12.3s  ratio 0.98"
    assert line(SKIPPED).splitlines()[1].strip() == "XLA:CPU cannot load <cached> programs"
