"""Rows of the box tables that nvidia-smi-like tools print (``| a | b | c |``): ixsmi, efsmi,
mx-smi, xpu-smi 5.x and cnmon parse their summaries with the one reader here."""

from __future__ import annotations


def box_cells(line: str, count: int | None = None, *, collapse: bool = True) -> list[str] | None:
    """The cells of one ``| a | b | c |`` row, each stripped (``collapse``: inner runs of
    blanks made one); None when ``line`` is not such a row or (``count``) has another number
    of cells."""
    if len(line) < 2 or not (line.startswith("|") and line.endswith("|")):
        return None
    parts = line[1:-1].split("|")
    if count is not None and len(parts) != count:
        return None
    return [" ".join(p.split()) if collapse else p.strip() for p in parts]
