#!/bin/bash
ssh node01 test -f a.txt
