"""The settings as documented (the README's and docs/reference.md's settings tables): each
setting's variable, group, default and meaning, read from :class:`gpufleet.config.Settings`."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.config import Settings


class SettingDoc:
    """One setting as documented: variable, group, default and meaning."""

    def __init__(self, env: str, group: str, field: str, default: str, doc: str) -> None:
        self.env = env
        self.group = group
        self.field = field
        self.default = default
        self.doc = doc


def _default_text(name: str) -> str:
    field = Settings.model_fields[name]
    if field.default_factory is not None or field.default is None:
        return {"home": "~/.local/share/gpufleet", "actor": "the OS user"}.get(name, "none")
    d = field.default
    if isinstance(d, timedelta):
        unit = "hours" if name == "validation_ttl" else "minutes"
        return f"{d.total_seconds() / (3600 if unit == 'hours' else 60):g}"
    return f"{d:g}" if isinstance(d, float) else str(d)


def settings_doc() -> list[SettingDoc]:
    """Every setting, in declaration order (the README's settings table lists the same)."""
    out = []
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra
        assert isinstance(extra, dict)
        out.append(
            SettingDoc(
                str(extra["env"]),
                str(extra["group"]),
                name,
                _default_text(name),
                field.description or "",
            )
        )
    return out
