touch ~/old-notes.txt
