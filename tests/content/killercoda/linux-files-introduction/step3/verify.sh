#!/bin/bash

if stat ~/old-notes.txt; then exit 1; fi
