"""The dataset: finding and inspecting images, captions and tags, buckets, class images, the numbers the Dataset page shows."""
