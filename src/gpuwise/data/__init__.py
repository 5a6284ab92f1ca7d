"""Feeding the device: store, batch loader, device prefetcher, device transforms."""
