"""The HTTP API's routes, one module per resource; each builds its ``APIRouter`` over an ``Api``."""
