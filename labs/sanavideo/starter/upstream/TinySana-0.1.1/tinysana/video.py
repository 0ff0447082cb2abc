"""MP4 in and out through imageio + imageio-ffmpeg (H.264, yuv420p)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_mp4(path: str | Path, frames: np.ndarray, fps: int = 8) -> None:
    """frames: uint8 (T, H, W, 3), H and W multiples of 16."""
    import imageio.v2 as imageio

    with imageio.get_writer(str(path), fps=fps, codec="libx264", quality=9, macro_block_size=16) as w:
        for frame in np.asarray(frames):
            w.append_data(frame)


def read_mp4(path: str | Path) -> tuple[np.ndarray, dict]:
    """(frames uint8 (T, H, W, 3), metadata with at least 'codec', 'fps', 'size')."""
    import imageio.v2 as imageio

    reader = imageio.get_reader(str(path), format="ffmpeg")
    try:
        meta = dict(reader.get_meta_data())
        frames = np.stack([np.asarray(f) for f in reader])
    finally:
        reader.close()
    return frames, meta
