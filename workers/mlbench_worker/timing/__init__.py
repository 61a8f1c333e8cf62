"""Where a rank's time goes: the seconds before its first step (startup phases), and each training
step's phases, stamped on a schedule that keeps the stamps cheap.
"""
