"""The Model & Precision page: the base model and VAE pickers, the precision picker, the VRAM meter, the precision lab's window."""
