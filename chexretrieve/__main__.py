from chexretrieve.cli import main

main()
