"""The speech-to-text runtime (issue 41): Whisper over windows of audio that share steps across jobs."""
