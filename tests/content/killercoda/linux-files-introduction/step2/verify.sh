#!/bin/bash

grep hello ~/greeting
