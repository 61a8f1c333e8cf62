"""What every spec model shares: the strict base model and the name rules Kubernetes imposes."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
HTTP_URL = re.compile(r"^https?://[^\s/?#]+(/\S*)?$")
# An image reference as the distribution project's grammar has it (reference/regexp.go).
_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
IMAGE_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kubernetes_label(pattern: re.Pattern[str], most: int, what: str) -> Any:
    """An after-validator for a Kubernetes label key or value (``what`` says what one looks like)."""

    def check(value: str) -> str:
        if len(value) > most or not pattern.fullmatch(value):
            raise PydanticCustomError("label", "{value} is not " + what, {"value": _shown(value)})
        return value

    return AfterValidator(check)


LabelKey = Annotated[
    str,
    _kubernetes_label(
        LABEL_KEY,
        317,
        "a Kubernetes label key: [prefix/]name, the name at most 63 letters, digits and '-_.' between "
        "letters or digits",
    ),
]
LabelValue = Annotated[
    str,
    _kubernetes_label(
        LABEL_VALUE,
        63,
        "a Kubernetes label value: at most 63 letters, digits and '-_.', starting and ending with a "
        "letter or digit (or empty)",
    ),
]
"""A Kubernetes label key and value: labels and node selectors end up on Kubernetes objects."""


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
