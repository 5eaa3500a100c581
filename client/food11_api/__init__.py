"""FastAPI front of the Food-11 captioning ensemble: upload a photo, read label, probability, caption."""
