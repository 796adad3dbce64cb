"""The Dataset page: the thumbnail grid, captions and tags, auto-captioning, class images."""
