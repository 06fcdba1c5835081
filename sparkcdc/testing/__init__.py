"""Tools for testing sparkcdc itself under faults (``proxy``: a TCP proxy that cuts, refuses,
delays and throttles connections). Not used by sparkcdc at run time."""
