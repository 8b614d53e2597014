"""Machine state: CPU, memory, processes grouped by application, GPU, and the verdict. No
Textual."""
