echo finished > finished
