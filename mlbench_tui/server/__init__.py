"""The metrics server: the HTTP API over the store, its auth, and how it is started."""
