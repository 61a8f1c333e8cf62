"""The local backend: a run's ranks as processes on this machine, forked warm from a process
that imported torch once or started cold by a launcher (``launch`` decides which), watched
through their records in the run directory (``records``) and the process table (``processes``)."""
