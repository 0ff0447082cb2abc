#!/bin/bash
[ -f ran.txt ]
