"""What the notebook shows and takes: the cell's source, the frontend, printed output, returned values, the stop buttons and interrupts."""
