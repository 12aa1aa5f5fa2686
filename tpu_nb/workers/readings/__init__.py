"""What a worker reads without waiting on its device: compilations and chip values (`device_readings`), the tokens
and samples it feeds (`step_counts`), tensors read back to the host (`read_back`).
"""
