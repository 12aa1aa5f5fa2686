"""Training progress: reported in the workers, drawn in the kernel."""
