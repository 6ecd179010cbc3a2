players 800
expel-new 4826175
tokio-rt-worker 5544185
expel-io-0 4409454820
expel-machine 3297503364
