"""What every spec model shares: the strict base model and the name rules Kubernetes imposes."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
HTTP_URL = re.compile(r"^https?://[^\s/?#]+(/\S*)?$")


class StrictModel(BaseModel):
    """Base for every spec model: strict types, unknown keys rejected, immutable once loaded."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


def with_short_form(*names: str, boolean: bool = False) -> Any:
    """A ``json_schema_extra`` that also accepts the string short form (``target: local``), and
    true/false when ``boolean``."""

    def extra(schema: dict[str, Any]) -> None:
        keep: dict[str, Any] = {k: schema.pop(k) for k in ("description", "title", "default") if k in schema}
        full = dict(schema)
        schema.clear()
        schema.update(keep)
        short: list[dict[str, Any]] = [{"type": "string", "enum": list(names)}]
        if boolean:
            short.append({"type": "boolean"})
        schema["anyOf"] = [*short, full]

    return extra
