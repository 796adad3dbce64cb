"""Can a run start: the Training page's start check and ``--check``'s look at the files on disk."""
