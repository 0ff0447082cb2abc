#!/bin/bash
echo ran > ran.txt
