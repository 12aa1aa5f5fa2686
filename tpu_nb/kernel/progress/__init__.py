"""How `report()` data and heartbeats become what the user sees.

`state` folds the workers' events into a snapshot; `recompilation` and
`throughput` (tokens/s, MFU) read it; `dashboard` (widgets, shown by
`display` and `widget_display`), `text` (terminals) and `summary` (the saved
end-of-run output) show it, with `chart` drawing the training chart and
`html_parts` the shared tables.
"""
