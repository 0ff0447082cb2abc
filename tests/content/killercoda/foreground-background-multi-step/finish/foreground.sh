echo bye
