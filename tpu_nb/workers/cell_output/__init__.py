"""What the cell shows of a worker: what it prints, as events (`printed_output`), and the user's exceptions,
formatted as IPython would (`tracebacks`).
"""
