"""gpufleet.cli.tables without a fleet: ranks decide what hides, widths are terminal cells
(CJK counts double), ``wide`` hides nothing and the table takes the width it needs."""

from __future__ import annotations

from io import StringIO

from rich.cells import cell_len
from rich.console import Console

from gpufleet.cli.tables import Col, fit, show

HOSTS = ["计算节点-甲-01", "计算节点-乙-02"]  # 7 characters of 2 cells: 15 wide in cells


def _console(width: int) -> tuple[Console, StringIO]:
    buf = StringIO()
    return Console(file=buf, width=width, emoji=False, color_system=None), buf


def _rows() -> list[list[str]]:
    return [[h, "available", "train-a100", "一切正常，无需处理"] for h in HOSTS]


COLS = [Col("主机", ident=True), Col("state", ident=True), Col("pool", 1, ident=True),
        Col("备注", 2)]


def test_cjk_identifiers_are_measured_in_cells_and_never_cut() -> None:
    # by len() the table needs 52 and fits 54; in cells (the host is 15) it needs 57
    console, buf = _console(54)
    fitted = show(COLS, _rows(), console=console)
    out = buf.getvalue()
    assert fitted.hidden == ["备注"]
    assert all(any(h in ln for ln in out.splitlines()) for h in HOSTS), out
    assert max(cell_len(ln) for ln in out.splitlines()) <= 54
    assert "1 column hidden (备注): --wide shows them" in " ".join(out.split())


def test_ranks_hide_the_highest_first_and_wide_hides_none() -> None:
    assert fit(COLS, _rows(), width=36, wide=False).hidden == ["pool", "备注"]
    assert fit(COLS, _rows(), width=200, wide=False).hidden == []
    console, buf = _console(30)
    fitted = fit(COLS, _rows(), width=30, wide=True)
    assert fitted.hidden == [] and fitted.note() is None
    console.print(fitted.table, crop=False)
    lines = buf.getvalue().splitlines()
    assert max(cell_len(ln) for ln in lines) > 30  # wider than the terminal ...
    assert all(any(h in ln for ln in lines) for h in HOSTS)  # ... and nothing cut


def test_rank_0_identifiers_wider_than_the_terminal_widen_the_table() -> None:
    uuid = "GPU-7a1417c9-dc76-5128-f9b7-68e230d5fb12"
    console, buf = _console(30)
    show([Col("#", ident=True), Col("UUID", ident=True)], [["0", uuid]], console=console)
    assert uuid in buf.getvalue()
