"""The ring algorithms (ring-sum, ring-sum-r, ring-histogram): Cyffers & Bellet, AISTATS 2022."""
