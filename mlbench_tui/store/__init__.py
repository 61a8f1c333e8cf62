"""The metric store: SQLite (WAL) tables, wire models, the single writer and read queries."""
