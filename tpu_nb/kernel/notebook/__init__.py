"""What the notebook shows and takes: the cell's source (`cell_source`), the `frontend`, printed output
(`cell_output`), returned values (`returns`, with PEFT `adapters`), the `stop_buttons` and `interrupts`.
"""
