"""Small widgets every page uses: elided labels, icons, drops, the page scaffold, the wheel guard, message boxes, opening with the desktop."""
