"""The stored form of a fair job: Celery's own protocol-2 message, as JSON.

The body stays exactly what Celery serialized (JSON only); headers and properties are kept so the
worker can rebuild the kombu message Celery would have received from the broker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .errors import FairqueueError

JSON_CONTENT_TYPE = "application/json"
#: The stored form's encoder, made once (json.dumps makes one a call: this runs every enqueue).
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


class MalformedEnvelopeError(FairqueueError):
    """A stored job is not a valid envelope (corrupted or written by something else)."""


@dataclass
class Envelope:
    body: str
    content_type: str = JSON_CONTENT_TYPE
    content_encoding: str = "utf-8"
    headers: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        # not dataclasses.asdict, which deep-copies the headers first: this runs on every enqueue
        return _ENCODER.encode({"body": self.body, "content_type": self.content_type,
                                "content_encoding": self.content_encoding,
                                "headers": self.headers, "properties": self.properties})

    @classmethod
    def from_json(cls, raw: str | bytes) -> Envelope:
        """Parse a stored envelope; :class:`MalformedEnvelopeError` says what is wrong."""
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise MalformedEnvelopeError(f"stored job is not JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("body"), str):
            raise MalformedEnvelopeError("stored job has no string 'body'")
        if not isinstance(data.get("headers", {}), dict) or not isinstance(
            data.get("properties", {}), dict
        ):
            raise MalformedEnvelopeError("stored job's headers or properties are not objects")
        if data.get("content_type", JSON_CONTENT_TYPE) != JSON_CONTENT_TYPE:
            raise MalformedEnvelopeError(
                f"stored job has content type {data.get('content_type')!r}; only JSON is accepted"
            )
        known = {k: data[k] for k in ("body", "content_type", "content_encoding", "headers",
                                      "properties") if k in data}
        return cls(**known)

    @property
    def task_name(self) -> str | None:
        return self.headers.get("task")
