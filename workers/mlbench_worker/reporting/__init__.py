"""How a rank's records reach the server and its launcher: the reporter that ships metrics, logs
and events over HTTP, the on-disk spool of unsent batches, and the error file of a failed rank.
"""
