"""Real model replies for ``foreign_replies``: data only, see that module.

``BARD_MATHVISTA``: Bard's replies on MathVista testmini, chosen among the short ones and keyed
``mathvista-<pid>``, from lupantech/MathVista @ 53d5258, results/bard/output_bard.json (the shared
copy is ``mathvista_testmini_output_bard.json``; CC BY-SA 4.0, by the MathVista authors; these
replies stay under that licence). ``MATHVERSE_TEMPLATE``: the example replies of
ZrrSkywalker/MathVerse @ 937b090, output_templates/ (MIT). The verdict of each reply was set by
reading it against the gold, not taken from either benchmark's own judgement (MathVista's
``true_false`` disagrees on some: pid 228 ends at 115 deg, not an option).
"""

BARD_MATHVISTA = [{'id': 'mathvista-20',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (B). No.\n'
           '\n'
           'The largest bar is Czechia with 21.37%, while the sum of the smallest two bars, Paraguay and Laos, is '
           '22.7%.\n'
           '\n'
           'Therefore, the sum of the smallest two bars is not greater than the largest bar.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-26',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The answer is **(B) no**.\n'
           '\n'
           'According to the graph, the value for Deep Sky Blue is 60, while the value for Black is 80. Therefore, '
           'Black is greater than Deep Sky Blue.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-43',
  'gold': 'May',
  'options': ('August', 'April', 'May'),
  'reply': 'The answer is (C), May.\n'
           '\n'
           'The graph shows that the average precipitation in Christchurch is highest in May, with about 60 mm of '
           'rain. The next wettest month is June, with about 50 mm of rain. The driest month is September, with '
           'about 18 mm of rain.\n'
           '\n'
           'So the wettest month in Christchurch on average is May.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-61',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The answer is **(B) no**.\n'
           '\n'
           'The scatter plot shows the hardness of different types of coral. The purple coral is harder than the '
           'coral, so it is the roughest. The answer in the image is incorrect because it says that coral is the '
           'roughest.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-65',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The correct answer is **(A) Yes**.\n'
           '\n'
           'The graph of the function passes the point (3, 5). This means that when x = 3, the value of the '
           'function is f(3) = 5, which is positive.\n'
           '\n'
           'Therefore, f(3) > 0.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-67',
  'gold': '16',
  'options': None,
  'reply': 'The perimeter of a square is the total length of all its sides added together. From the image, we can '
           'see that each side of the square is 4 m long. So the perimeter of the square is 4 m + 4 m + 4 m + 4 m '
           '= **16 m**.\n'
           '\n'
           'Is there anything else I can help you with?',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-71',
  'gold': '18',
  'options': None,
  'reply': 'I see the image. The dimensions of the rectangle are 6 feet and 3 feet.\n'
           '\n'
           'The perimeter of a rectangle is the total length of all its sides. So, the perimeter of this rectangle '
           'is 2 * (6 feet + 3 feet) = 2 * 9 feet = **18 feet**.\n'
           '\n'
           'Is there anything else I can help you with?',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-91',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (B), No.\n'
           '\n'
           'I cannot see any brown SUVs in the image. There is only one brown school bus. So the number of brown '
           'SUVs is 0, which is less than the number of brown school buses, which is 1.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-110',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (B) No.\n'
           '\n'
           'The sum of the two lowest bars (0.005% and 0.01%) is 0.015%, which is less than the largest bar of '
           '0.02%.\n'
           '\n'
           'The correct answer is therefore choice (B).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-112',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (B). There are 3 gray shiny utility bikes and only 2 big cyan airliners in the image. So '
           'the number of gray shiny utility bikes is more than the number of big cyan airliners.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-121',
  'gold': '5',
  'options': None,
  'reply': 'The rate of change between Wednesday and Thursday is calculated by subtracting the amount Manny spent '
           'on lunch on Wednesday from the amount he spent on lunch on Thursday. So, the rate of change = $7 - $2 '
           '= $5 per day.\n'
           '\n'
           'Therefore, the answer is 5',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-131',
  'gold': '3',
  'options': None,
  'reply': 'There are 3 bars below 40 in the image. They are the bars for the years 2014, 2015, and 2016. The '
           'values for these bars are 58, 59, and 63, respectively.\r\n'
           '\r\n'
           'Do you want to try other questions about the image?',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-136',
  'gold': '64',
  'options': None,
  'reply': 'I understand. The highest value of the blue bar is 89% and the lowest value is 25%. So the difference '
           'between the highest and lowest value of the blue bar is 89 - 25 = **64%**.\n'
           '\n'
           'Is there anything else I can help you with?',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-138',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (A) Yes.\n'
           '\n'
           'The image shows a half eaten sandwich on a piece of paper. The sandwich is clearly cut in half, with '
           'the two halves separated by a horizontal line. The top half of the sandwich is missing a bite, while '
           'the bottom half is still intact.\n'
           '\n'
           'Therefore, the sandwich is cut in half.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-144',
  'gold': '13.8',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'The price of turmeric is $3 per kilogram. So 4.6 kilograms of turmeric will cost 4.6 x $3 = $13.8.\n'
           '\n'
           'In one decimal place, the total cost is 13.80.\n'
           '\n'
           'So the answer is 13.80',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-162',
  'gold': '4',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'Looking at the image, there are 4 flocks with at least 17 birds but fewer than 33 birds. They are the '
           'flocks with 17, 23, 29, and 32 birds.\n'
           '\n'
           'So the answer is 4',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-170',
  'gold': 'smaller than',
  'options': ('larger than', 'equal to', 'smaller than'),
  'reply': 'The correct choice is (C). f(-1) is smaller than f(0).\n'
           '\n'
           'According to the graph, the point (-1, 0.5) is on the graph of the function, which means that f(-1) = '
           '0.5. The point (0, 1) is also on the graph, which means that f(0) = 1. Therefore, f(-1) = 0.5 < f(0) = '
           '1.\n'
           '\n'
           'So the answer is (C).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-173',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The correct answer is **(B)**, No.\n'
           '\n'
           'There are 3 small rubber busses behind the big green road bike. There are 4 SUVs behind the large '
           'brown matte truck.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-182',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The correct answer is **(B) no**.\n'
           '\n'
           'The image shows a line graph of the number of labels for different colors. The number of labels for '
           'Web Green is 70, while the number of labels for Yellow is 85. Therefore, Web Green is not greater than '
           'Yellow.\n'
           '\n'
           'I hope this answers your question. Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-28',
  'gold': '8.5',
  'options': ('7.5', '8', '8.5', '17'),
  'reply': 'The diameter of a circle is twice the radius. Since $\\overline{AB}$ is a diameter, we have $AB=2r$. '
           'We are also given that $AC=8$ inches and $BC=15$ inches. Using the Pythagorean Theorem on right '
           'triangle $ABC$, we have $AB^2=AC^2+BC^2$. Plugging in the known values, we get $2r^2=8^2+15^2=289$. '
           'Solving for $r$, we get $r=\\sqrt{289/2}=\\boxed{8.5}$ inches.\n'
           '\n'
           'Note that we could have also found the radius by dividing the diameter by 2. However, using the '
           'Pythagorean Theorem allowed us to find the radius without having to calculate the diameter first.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-30',
  'gold': '70°',
  'options': ('60°', '70°', '80°', '85°'),
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'The answer is **(B). 70°**.\n'
           '\n'
           'Angles AEC and CED are inscribed angles that intercept the same arc, so they are congruent. Therefore, '
           'm∠AEC = m∠CED = 105°.\n'
           '\n'
           'Angles AED and ECD are opposite angles, so they are supplementary. Therefore, m∠AED + m∠ECD = 180°.\n'
           '\n'
           'Substituting m∠AEC = 105° and m∠CED = 105°, we get m∠AED + 105° + 105° = 180°.\n'
           '\n'
           'Solving for m∠AED, we get m∠AED = 70°.\n'
           '\n'
           'Finally, since ∠AED and ∠C are corresponding angles, they are congruent. Therefore, m∠C = m∠AED = '
           '**70°**.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-39',
  'gold': 'odd',
  'options': ('odd', 'even'),
  'reply': 'The function in the image is **odd**.\n'
           '\n'
           'An even function is a function where f(-x) = f(x). An odd function is a function where f(-x) = -f(x).\n'
           '\n'
           'In the case of the function y = a2x - a1, if we substitute x = -x, we get:\n'
           '\n'
           '```\n'
           'y = a2(-x) - a1\n'
           '= -a2x + a1\n'
           '```\n'
           '\n'
           'This is not equal to f(x), so the function is **odd**.\n'
           '\n'
           'The correct choice is (A).\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-55',
  'gold': '30°',
  'options': ('60°', '45°', '30°', '25°'),
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'Given:\n'
           '* Triangle ABC is a right-angled triangle with angle A = 90° and angle C = 60°.\n'
           '* AB is the hypotenuse and bisects angle CAG.\n'
           '* AB intersects line DE at point H.\n'
           '\n'
           'To find:\n'
           '* The measure of angle BCH.\n'
           '\n'
           'Solution:\n'
           '1. Since AB bisects angle CAG, then angle ACG = 60/2 = 30°.\n'
           '2. Since line FG is parallel to line DE, then angles ACG and BCH are corresponding angles and are '
           'equal.\n'
           '3. Therefore, angle BCH = 30°.\n'
           '\n'
           'So the answer is (C).\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-56',
  'gold': '6',
  'options': None,
  'reply': 'The perimeter of a rectangle is the total length of all its sides added together.\n'
           '\n'
           'The rectangle in the image has a width of 1 yard and a length of 2 yards. So, the perimeter is:\n'
           '\n'
           '```\n'
           'perimeter = 2 * (width + length)\n'
           'perimeter = 2 * (1 + 2)\n'
           'perimeter = 2 * 3\n'
           'perimeter = 6 yards\n'
           '```\n'
           '\n'
           'Therefore, the perimeter of the rectangle in the image is **6 yards**.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-103',
  'gold': '2',
  'options': None,
  'reply': 'I understand. Based on the image, there are 3 objects: a purple ball, a gray cylinder, and a brown '
           'square.\n'
           '\n'
           'Following the instructions, we first subtract all small purple matte blocks. There are no small purple '
           'matte blocks in the image, so the number of objects is still 3.\n'
           '\n'
           'We then subtract all blocks. There is 1 block in the image, so the number of objects is reduced to 2.\n'
           '\n'
           'Therefore, there are **2** objects left in the image after subtracting all small purple matte blocks '
           'and all blocks.\n'
           '\n'
           'Is there anything else I can help you with?',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-120',
  'gold': '3',
  'options': None,
  'reply': 'I see the image. The degree of a polynomial function is the highest power of the variable in the '
           'function. In the image, the function appears to be of the form $y=ax^3+bx^2+cx+d$, where $a$, $b$, '
           '$c$, and $d$ are constants. The highest power of $x$ is 3, so the degree of the function is '
           '$\\boxed{3}$.\n'
           '\n'
           'To be more precise, we can count the number of turning points in the graph. There are 2 turning '
           'points, so the degree of the function must be one less than the number of turning points, which is '
           '$\\boxed{3}$.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-137',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The correct answer is **(B) No**.\n'
           '\n'
           'The function f(x) = x² is not injective because it takes two different inputs, -1 and 1, to the same '
           'output, 1. This means that there is no one-to-one correspondence between the domain and the range of '
           'the function.\n'
           '\n'
           'In the image, we can see that the graph of the function passes through the points (-1, 1) and (1, 1). '
           'This means that f(-1) = f(1) = 1. So, if we have two different inputs, -1 and 1, they both map to the '
           'same output, 1. This violates the definition of an injective function.\n'
           '\n'
           'Therefore, the answer is (B).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-143',
  'gold': '3',
  'options': ('1', '2', '3', '6'),
  'reply': 'The answer is (C).\n'
           '\n'
           'Since CE bisects ∠BCD, ∠CEB = ∠ECD = ∠BCD/2.\n'
           '\n'
           'Triangle CEB is a right triangle with right angle at E, so ∠CEB + ∠ECD + ∠CEB = 90°.\n'
           '\n'
           'Hence, ∠CEB + ∠CEB = 90°\n'
           '\n'
           'or, 2∠CEB = 90°\n'
           '\n'
           'or, ∠CEB = 45°\n'
           '\n'
           'Triangle CEB is a 45-45-90 triangle, so EB = CE = 3.0.\n'
           '\n'
           'Since ABCD is a parallelogram, AB = DC.\n'
           '\n'
           'Also, AB = EB + BC = 3.0 + BC.\n'
           '\n'
           'But BC = EB = 3.0.\n'
           '\n'
           'Therefore, AB = 3.0 + 3.0 = 6.0.\n'
           '\n'
           'So the answer is (C).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-146',
  'gold': '4',
  'options': None,
  'reply': 'The range of the numbers is the difference between the highest and lowest number. In this case, the '
           'highest number is 9 and the lowest number is 5, so the range is 9 - 5 = **4**.\n'
           '\n'
           'To find the range, we can also subtract each number from the highest number. For example, 8 - 9 = -1, '
           '6 - 9 = -3, and so on. The smallest of these differences is -3, so the range is 9 - (-3) = **4**.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-193',
  'gold': '3',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'If we subtract all red things and all cylinders from the image, there are 3 objects left.\n'
           '\n'
           'There are 2 blue balls and 1 green ball. None of these are cylinders, so they are all still there. The '
           'red cylinder and the yellow cylinder are subtracted, leaving only the blue and green balls.\n'
           '\n'
           'So the answer is 3.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-196',
  'gold': '0.5cm2',
  'options': ('2cm2', '1cm2', '0.5cm2', '0.25cm2'),
  'reply': 'The answer is (C).\n'
           '\n'
           'Since D and E are the midpoints of sides BC and AD respectively, then DE is parallel to AB and half of '
           'its length.\n'
           '[asy]\n'
           'pair A,B,C,D,E,F;\n'
           'A = (0,0);\n'
           'B = (5,0);\n'
           'C = (2.5,4);\n'
           'D = (2.5,0);\n'
           'E = (0,2);\n'
           'F = (2.5,2);\n'
           'draw(A--B--C--cycle);\n'
           'draw(D--E--F--cycle);\n'
           'label("$A$",A,SW);\n'
           'label("$B$",B,SE);\n'
           'label("$C$",C,NE);\n'
           'label("$D$",D,S);\n'
           'label("$E$",E,W);\n'
           'label("$F$",F,N);\n'
           '[/asy]\n'
           '\n'
           'Therefore, the ratio of the areas of △DEF and △ABC is 1:4.\n'
           '\n'
           'Since S△ABC=4cm2, then S△DEF=1cm2.\n'
           '\n'
           'So the answer is (C).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-215',
  'gold': '8',
  'options': None,
  'reply': 'Sure. The range of a set of data is the difference between the highest and lowest values in the set. '
           'In this case, the highest number of miles hiked is 10 and the lowest number is 2. So the range is 10 - '
           '2 = **8 miles**.\n'
           '\n'
           'Here is the calculation in detail:\n'
           '\n'
           '1. Find the highest number of miles hiked: 10 miles\n'
           '2. Find the lowest number of miles hiked: 2 miles\n'
           '3. Subtract the lowest number from the highest number: 10 - 2 = **8 miles**\n'
           '\n'
           'Therefore, the range of the number of miles Layla hiked is 8 miles.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-3',
  'gold': '145°',
  'options': ('135°', '140°', '145°', '150°'),
  'reply': 'The correct answer is **(C) 145°**.\n'
           '\n'
           'Since the angle bisectors of angles B and C intersect at point O, then ∠BOC = 90° + ∠A/2 = 90° + '
           '110°/2 = **145°**.\n'
           '\n'
           'Here is the proof:\n'
           '\n'
           '```\n'
           '[ABC]\n'
           'O-----B\n'
           '/   \\\n'
           '/____\\\n'
           'A     C\n'
           '\n'
           '∠BOC = ∠1 + ∠2\n'
           '\n'
           '∠1 = ∠A/2\n'
           '\n'
           '∠2 = 180° - ∠A - ∠1 = 180° - ∠A - ∠A/2 = 180° - 3∠A/2\n'
           '\n'
           '∠BOC = ∠1 + ∠2 = ∠A/2 + 180° - 3∠A/2 = 90° + ∠A/2\n'
           '```\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-178',
  'gold': '55°',
  'options': ('35°', '45°', '55°', '65°'),
  'reply': 'The correct answer is **(C)**, 55°.\n'
           '\n'
           '* Since BE bisects ∠FBD, ∠FBE = ∠BDE = 35/2 = 17.5°.\n'
           '* Since CE bisects ∠ACD, ∠ACE = ∠ECD = 70°.\n'
           '* ∠FAE = ∠ACE - ∠BEC = 70° - 35° = **55°**.\n'
           '\n'
           'Here is the detailed solution:\n'
           '\n'
           '```\n'
           'Given:\n'
           '* BE bisects ∠FBD\n'
           '* CE bisects ∠ACD\n'
           '* ∠BEC = 35°\n'
           '\n'
           'To find: ∠FAE\n'
           '\n'
           'Solution:\n'
           '1. Since BE bisects ∠FBD, ∠FBE = ∠BDE = 35/2 = 17.5°.\n'
           '2. Since CE bisects ∠ACD, ∠ACE = ∠ECD = 70°.\n'
           '3. ∠FAE = ∠ACE - ∠BEC = 70° - 35° = 55°.\n'
           '```',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-6',
  'gold': '6cm',
  'options': ('6cm', '7cm', '4cm', '5cm'),
  'reply': 'The answer is (D).\n'
           '\n'
           'Since D is the midpoint of AC, then AD = DC = (AC/2).\n'
           '\n'
           'We know that CB = 4.0 and DB = 7.0, and that AD = DC. So we can write the equation:\n'
           '\n'
           '```\n'
           'AD + DC = 4.0 + 7.0\n'
           '```\n'
           '\n'
           '```\n'
           '2AD = 11.0\n'
           '```\n'
           '\n'
           '```\n'
           'AD = 5.5\n'
           '```\n'
           '\n'
           '```\n'
           'AC = 2AD = 11.0 cm\n'
           '```\n'
           '\n'
           'Therefore, the length of AC is 11.0 cm, which is answer choice (D).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-8',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The correct answer is (B), No.\n'
           '\n'
           'There are zero tiny gray bicycles to the left of the brown metal sedan. There are one tiny green '
           'bicycle, one motorcycle, and one car to the left of the tiny green bicycle.\n'
           '\n'
           'The code snippet you provided correctly outputs "No".\n'
           '\n'
           'I hope this answers your question!',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-22',
  'gold': '0',
  'options': None,
  'reply': "Sorry, I can't help with images of people yet.",
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-24',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'Based on the image, the correct answer is **(A) yes**.\n'
           '\n'
           'The bar for Periwinkle is the tallest, which means it has the maximum value of 100 visitors. The other '
           'two bars, Dark Salmon and Gray, have values of 80 and 60 visitors, respectively.\n'
           '\n'
           'So the answer to the question is yes, Periwinkle is the maximum.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-32',
  'gold': '70°',
  'options': ('40°', '50°', '60°', '70°'),
  'reply': 'The answer is (C). 60°.\n'
           '\n'
           '```\n'
           'Given:\n'
           'AB=AC, ∠CAB=40°\n'
           '\n'
           'To find: ∠D\n'
           '\n'
           'Solution:\n'
           'Since AB=AC, so ∆ABC is an isosceles triangle.\n'
           'Hence, ∠ABC=∠ACB=40/2=20°\n'
           'Also, ∠ACB+∠CAB+∠ACD=180°\n'
           '=> 20°+40°+∠ACD=180°\n'
           '=> ∠ACD=120°\n'
           'But ∠ACD=∠D (angles in the same segment)\n'
           '=> ∠D=120°\n'
           '```\n'
           'Therefore, the degree of ∠D is 60°.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-47',
  'gold': '6',
  'options': None,
  'reply': 'I see the image. There are 7 objects in total.\n'
           '\n'
           'If we subtract all rubber balls, there are 5 objects left.\n'
           '\n'
           'If we subtract all yellow shiny things, there are 4 objects left.\n'
           '\n'
           'If we subtract all rubber balls and all yellow shiny things, there are **3 objects left**.\n'
           '\n'
           'The answer is 3.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-51',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The correct answer is **(B) No**.\n'
           '\n'
           'There are 10 gray rubber objects in front of the small yellow aeroplane. There are only 5 big cyan '
           'matte fighters. Therefore, the number of gray rubber objects is not greater than the number of big '
           'cyan matte fighters.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-54',
  'gold': '10',
  'options': ('8', '10', '15', '18', '20'),
  'reply': 'The correct answer is **(C) 15**.\n'
           '\n'
           'The ratio of AB to AC is 2:5, which means AB = 2/7 * AC.\n'
           '\n'
           'Plugging in AC = 25, we get AB = 2/7 * 25 = 15.\n'
           '\n'
           'So the answer is (C).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-58',
  'gold': 'yes',
  'options': ('yes', 'no'),
  'reply': 'The answer is (B) no.\n'
           '\n'
           'The area under the curve is the total number of firebricks and oranges. In the graph, the area under '
           'the curve is 66 + 65 = 131. The maximum number of firebricks is 68, so firebrick does not have the '
           'maximum area under the curve.\n'
           '\n'
           'The correct answer is therefore (B).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-72',
  'gold': '1',
  'options': None,
  'reply': 'There are 2 blocks that have exactly 36 houses.\n'
           '\n'
           'The stem and leaf plot shows that the number of houses per block ranges from 0 to 99. The stem value 3 '
           'represents the number 30, so the leaf values 6 and 2 represent the blocks with 36 houses.\n'
           '\n'
           'Therefore, there are 2 blocks that have exactly 36 houses.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-75',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The correct answer is **(A)**, yes.\n'
           '\n'
           'According to the pie chart, sky blue has a percentage of 20%, while web maroon has a percentage of '
           '30%. Therefore, sky blue is less than web maroon.\n'
           '\n'
           'I hope this answers your question. Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-83',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (B) No.\n'
           '\n'
           'There are 2 shiny things in the image: the bus and the motorcycle. There are 4 matte things: the '
           'bicycle, the person, the road, and the ground.\n'
           '\n'
           'So the number of shiny things is equal to the number of matte things.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-84',
  'gold': '130.9',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'Given that ABCD is a square inscribed in a circle with center O, we know that ∠AOB = 90°. Since ∠AMK '
           'is an inscribed angle that intersects arc AMB, we know that ∠AMK = 1/2 * ∠AOB = 45°.\n'
           '\n'
           'The answer is 45.0.\n'
           '\n'
           'Do you have other questions for me?',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-96',
  'gold': '3.9',
  'options': None,
  'reply': 'The dissatisfied people are 78%, which is 1.2 times more than the satisfied people (20%). So the '
           'answer is 1.2.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-98',
  'gold': '2',
  'options': None,
  'reply': 'The value of the square in the figure is **7**.\n'
           '\n'
           "Here's how to solve it:\n"
           '\n'
           '1. 5 + 8 = 13\n'
           '2. 13 + 7 = 20\n'
           '3. 20 / 2 = 10\n'
           '\n'
           'The answer is the **final** number, which is 10.\n'
           '\n'
           'Do you want to try other brain teasers?',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-99',
  'gold': 'white one',
  'options': ('white five', 'white three', 'white four', 'white one', 'white two'),
  'reply': 'The answer must be the name of a cat in the image. There is no cat named white four, white three, '
           'white one, white two, or white five in the image. So the answer is (E). There is no cat in the image.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-100',
  'gold': '12',
  'options': None,
  'reply': 'The ruling group is the group of bars with the highest values. In the image, the ruling group is the '
           'bars for 8 and 10. The sum of the values in the ruling group is 8 + 10 = **18**.\n'
           '\n'
           'Do you have other questions or requests?',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-102',
  'gold': '6',
  'options': None,
  'reply': 'I see the image. There are 3 rows of 4 unit squares each. So the area of the shape is 3 x 4 = **12 '
           'square units**.\n'
           '\n'
           'Is there anything else I can help you with?',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-106',
  'gold': '0',
  'options': None,
  'reply': 'I see the image. There are 3 bars with values smaller than 1. They are:\n'
           '\n'
           '* bull (0.8)\n'
           '* wish (0.5)\n'
           '* heap (0.2)\n'
           '\n'
           'So the answer is 3.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-108',
  'gold': '51.04',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'The bottom two countries in the image are Mozambique and Madagascar, with 44% and 58.09% of scheduled '
           'teaching time respectively. The average of these two values is (44 + 58.09)/2 = 51.045. Rounding to '
           'two decimal places, the average is 51.05.\n'
           '\n'
           'So the answer to your question is 51.05.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-113',
  'gold': '20',
  'options': None,
  'reply': 'I see the image. There are a total of 3 baseballs in the image.\n'
           '\n'
           'The first bucket on the left has 1 baseball.\n'
           'The second bucket in the middle has 1 baseball.\n'
           'The third bucket on the right has 1 baseball.\n'
           '\n'
           'So the total number of baseballs is 1 + 1 + 1 = 3.\n'
           '\n'
           'Is there anything else I can help you with?',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-133',
  'gold': '4',
  'options': None,
  'reply': 'Based on the image, the merchandise exports are greater than 0.92% in 3 years: 2004, 2006, and 2008.\n'
           '\n'
           'In 2004, the merchandise exports were 1.02%.\n'
           'In 2006, the merchandise exports were 1.12%.\n'
           'In 2008, the merchandise exports were 1.22%.\n'
           '\n'
           'In all other years, the merchandise exports are less than 0.92%.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-141',
  'gold': '4.40米',
  'options': ('3.85米', '4.00米', '4.40米', '4.50米'),
  'reply': 'The correct answer is (B).\n'
           '\n'
           'From the Pythagorean theorem, we have:\n'
           '\n'
           '```\n'
           'AB^2 = AD^2 + BD^2\n'
           '```\n'
           '\n'
           '```\n'
           'AB^2 = (1.6 + 1.4)^2 + 0.55^2\n'
           '```\n'
           '\n'
           '```\n'
           'AB^2 = 4.04 + 0.3025\n'
           '```\n'
           '\n'
           '```\n'
           'AB = 2.01\n'
           '```\n'
           '\n'
           '```\n'
           'AB = 4.00 m (answer)\n'
           '```\n'
           '\n'
           'In conclusion, the length of the ladder is 4.00 meters.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-142',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The correct answer is **(A) Yes**.\n'
           '\n'
           'The image shows a pizza sitting on top of a white plate. The pizza is split in half by a clean cut, '
           'and the two halves are evenly spaced apart. There is no evidence that the pizza has been cut into any '
           'other slices. Therefore, the pizza is split in half.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-149',
  'gold': '55°',
  'options': ('55°', '60°', '65°', '70°'),
  'reply': 'The answer is (B).\n'
           '\n'
           'Given that l1∥l2, so ∠1 = ∠3 (内错角相等).\n'
           '∠1 = 50° and ∠2 = 75°, so ∠3 = ∠1 = **60°**.\n'
           '\n'
           'Here is the explanation:\n'
           '\n'
           '* ∠1 and ∠3 are内错角(interior angles on the same side of transversal l), so ∠1 = ∠3.\n'
           '* ∠1 = 50° and ∠2 = 75°, so ∠3 = ∠1 = **60°**.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-169',
  'gold': '5',
  'options': None,
  'reply': 'The difference between two consecutive major ticks on the Y-axis in the image is **1**.\n'
           '\n'
           'The first major tick is at 20, and the second major tick is at 21. This means that the difference '
           'between the two ticks is 1.\n'
           '\n'
           'The minor ticks are spaced every 0.5 units, so the difference between two consecutive minor ticks is '
           '0.5.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-177',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (B). There are two brown tandem bikes to the left of the small blue matte car, and there '
           'is only one tiny blue biplane. So the number of brown tandem bikes is not greater than the number of '
           'tiny blue biplanes.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-190',
  'gold': '2',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'I see the image. The nail is about 3 inches long. The ruler is marked in inches, and the nail is just '
           'past the 2-inch mark and not quite to the 3-inch mark. Therefore, the nail is about 3 inches long.\n'
           '\n'
           'Do you have any other questions?',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-201',
  'gold': '19',
  'options': None,
  'reply': 'The border group is the group of values that are on the edges of the table. In this case, the border '
           'group is 5, 0, and 20. The sum of these values is 25.\n'
           '\n'
           'So the answer to the question is **25**.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-228',
  'gold': '50°',
  'options': ('50°', '55°', '60°', '65°'),
  'reply': 'The answer is (D).\n'
           '\n'
           '```\n'
           'Given:\n'
           '- AB is the diameter of circle O\n'
           '- DB and DC are respectively tangent to circle O at points B and C\n'
           '- ∠ACE = 25.0\n'
           '\n'
           'To find:\n'
           '- ∠D\n'
           '\n'
           'Solution:\n'
           '1. Since DB and DC are tangents to circle O, ∠DBC = 90°\n'
           '2. ∠ACE = ∠CDB (Angles in the same segment)\n'
           '3. ∠CDB = 90 - ∠ACE = 90 - 25 = 65°\n'
           '4. ∠D = 180 - ∠CDB = 180 - 65 = 115°\n'
           '```\n'
           '\n'
           'Therefore, the degree of ∠D is **115°**.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-234',
  'gold': '6',
  'options': ('3', '5', '6', '7', 'It cannot be determined from the information given'),
  'reply': 'The answer is (C).\n'
           '\n'
           'The triangle in the figure is an equilateral triangle. In an equilateral triangle, all three sides are '
           'equal. Since AC = 6, then AB = 6.\n'
           '\n'
           'Choice (A) is incorrect because the length of AB is greater than 3.\n'
           '\n'
           'Choice (B) is incorrect because the length of AB is greater than 5.\n'
           '\n'
           'Choice (D) is incorrect because the length of AB is not equal to 7.\n'
           '\n'
           'Choice (E) is incorrect because the length of AB can be determined from the information given.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-245',
  'gold': '24',
  'options': None,
  'reply': 'Based on the image, the grilled steak costs $13 and the mushroom pizza costs $11. So Damon needs $13 + '
           '$11 = $24 to buy both items.\n'
           '\n'
           'So the answer is 24',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-248',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (B). There are no green matte choppers in the image. There is only one large yellow '
           'shiny motorbike. So the number of large yellow shiny motorbikes is greater than the number of green '
           'matte choppers.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-268',
  'gold': '10.4',
  'options': None,
  'reply': 'Sure. I can help you with that.\n'
           '\n'
           'The price of English muffins is $8 per kilogram. Colton wants to buy 1+3/10 = 13/10 kilograms of '
           'English muffins.\n'
           '\n'
           'So he will spend 13/10*$8 = $10.40.\n'
           '\n'
           'In one decimal place, the amount he needs to spend is 10.4.\n'
           '\n'
           'So the answer is 10.4',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-280',
  'gold': '60',
  'options': ('80', '60', '40', '30', '20'),
  'reply': 'The answer is (B). 60 degrees.\n'
           '\n'
           'A regular hexagon has 6 equal sides and 6 equal angles. So, each angle of a regular hexagon is equal '
           'to 180(6-2)/6 = 120 degrees.\n'
           '\n'
           'Angle AOC is an exterior angle of triangle AOB. Therefore, angle AOC = 180 - angle AOB = 180 - 120 = '
           '60 degrees.\n'
           '\n'
           'The answer is (B). 60 degrees.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-289',
  'gold': '2',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'If the model has 4 dots divided into 2 equal groups, then there are **2** dots in each group.\n'
           '\n'
           'This is because 4 divided by 2 is 2. So, the total number of groups is 2, and the number of dots in '
           'each group is 4 divided by the number of groups, which is 2.\n'
           '\n'
           'Therefore, the answer to the question is 2.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-295',
  'gold': '3',
  'options': None,
  'reply': 'Sure. I can help you with that.\r\n'
           '\r\n'
           'The model has 9 dots divided into 3 equal groups. There are **3** dots in each group.\r\n'
           '\r\n'
           'To solve this, we can divide the total number of dots (9) by the number of groups (3). 9 ÷ 3 = 3. '
           'Therefore, there are 3 dots in each group.\r\n'
           '\r\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-306',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'Based on the image you sent me, the bed is much larger than the kitten. The kitten is about the size '
           "of the woman's hand, while the bed is at least twice as long. So the answer is (A).",
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-314',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'Based on the image, the correct answer is **(B) no**.\n'
           '\n'
           'The bar with the lowest value is the pale green bar, which has a value of 0. The crimson bar has a '
           'value of 20, which is higher than the value of the pale green bar. Therefore, crimson is not the '
           'minimum value.\n'
           '\n'
           'Here is a table of the values for each color:\n'
           '\n'
           'Color | Value\n'
           '------- | --------\n'
           'Pale Green | 0\n'
           'Crimson | 20\n'
           'Purple | 40\n'
           'Dark Red | 60\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-321',
  'gold': 'surplus',
  'options': ('shortage', 'surplus'),
  'reply': 'The correct answer is **(B)**, surplus.\n'
           '\n'
           'At a price of $330, the quantity supplied is 15,400 units while the quantity demanded is 11,000 '
           'units. \n'
           '\n'
           'Since the quantity supplied is more than the quantity demanded, there is a surplus of 4,400 units at a '
           'price of $330.\n'
           '\n'
           'So the answer is (B), surplus.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-332',
  'gold': '7873',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'The taxi cab driver drove 5,936 miles in January and 1,937 miles in April. The total number of miles '
           'driven in January and April is 5,936 + 1,937 = **7,873 miles**.\n'
           '\n'
           'So the answer is 7873',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-338',
  'gold': '8',
  'options': ('6', '8', '2*x', '4*x', '4*x^2'),
  'reply': 'The answer is (B). 8.\n'
           '\n'
           'Since E is the midpoint of AB, we know that BE = EA = x.\n'
           'Since D is the midpoint of AC, we know that CD = AD = 4.\n'
           'Triangle AED is a 45-45-90 triangle, so we know that DE = AD = CD = 4.\n'
           'Thus, BC = BE + CE = x + 4 = 8.\n'
           '\n'
           'I hope this helps!',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-341',
  'gold': "o'clock",
  'options': ('half', 'quarter', "o'clock", 'quarter to', 'quarter past'),
  'reply': "The time shown in the image is 6:00. So the answer is **(C) o'clock**.\n"
           '\n'
           "The hour hand is pointing to the 6, which means it is 6 o'clock. There are no other numbers between "
           'the hour hand and the minute hand, so it is not quarter to or quarter past any hour.\n'
           '\n'
           'The answer choices (A), (B), and (E) are not correct because they do not describe the time shown in '
           'the image.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-347',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The correct answer is **(B) No**.\n'
           '\n'
           'There is only 1 green metallic double bus in the image, and there are 3 big purple rubber cruisers. '
           'Therefore, the number of green metallic double busses is not less than the number of big purple rubber '
           'cruisers.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-349',
  'gold': 'Rec',
  'options': ('Rec', 'OCR', 'Know', 'Gen', 'Spat', 'Math'),
  'reply': 'The answer is **(A) Rec**.\n'
           '\n'
           'According to the image, the proportion of **Rec** (recognition) is 68.8%, which is the highest among '
           'all the capabilities.\n'
           '\n'
           'The other capabilities and their corresponding proportions are:\n'
           '\n'
           '* OCR (optical character recognition): 44.0%\n'
           '* Know (knowledge): 38.5%\n'
           '* Gen (language generation): 34.4%\n'
           '* Spat (spatial awareness): 20.0%\n'
           '* Math (mathematics): 11.9%\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-357',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The answer is (B), no. The graph shows the amount of turquoise in different foods, not the roughness '
           'of the fish. Salmon is not even on the graph, so it cannot be the roughest fish. The roughest fish in '
           'the world is the tigerfish, which is found in Africa. It has sharp teeth and a powerful bite.\r\n'
           '\r\n'
           'The image you sent me is not relevant to the question. It shows a graph of the amount of turquoise in '
           'different foods.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-358',
  'gold': 'A',
  'options': ('A', 'B', 'C', 'D', 'E'),
  'reply': 'The answer is **(A)**.\n'
           '\n'
           'The unfolded cube shows 6 squares, each with 4 edges and 4 corners. Option A is the only cube that has '
           '6 square faces, each with 4 edges and 4 corners.\n'
           '\n'
           'Option B has a square face with 5 edges.\n'
           'Option C has a square face with 3 corners.\n'
           'Option D is a mirror image of Option A.\n'
           'Option E is not a cube.\n'
           '\n'
           'Therefore, the only cube that can be formed by folding the unfolded cube is Option A.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-232',
  'gold': 'Solution B',
  'options': ('neither; their concentrations are the same', 'Solution B', 'Solution A'),
  'reply': 'The answer is **(C) Solution A**.\n'
           '\n'
           'In Solution A, there are 4 pink particles in a volume of 25 mL. So the concentration of pink particles '
           'in Solution A is 4/25 = 0.16.\n'
           '\n'
           'In Solution B, there are 3 pink particles in a volume of 25 mL. So the concentration of pink particles '
           'in Solution B is 3/25 = 0.12.\n'
           '\n'
           'Therefore, Solution A has a higher concentration of pink particles than Solution B.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-239',
  'gold': 'yes',
  'options': ('yes', 'no'),
  'reply': 'Based on the image, the correct answer is **(B) no**.\n'
           '\n'
           'The minimum value in the graph is 20, which is the value for the **Light Salmon** fish. The **Sky '
           'Blue** fish has an average life of 40 years, which is higher than the minimum value.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-262',
  'gold': '39',
  'options': None,
  'reply': 'The highest percentage of female viewers watch cooking shows (41%), while the lowest percentage watch '
           'dating shows (11%). So the difference is 41 - 11 = **30** percentage points.\n'
           '\n'
           'To be more specific, 41% of females watch cooking shows, while only 11% watch dating shows. This means '
           'that there is a 30 percentage point difference between the two genres.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-283',
  'gold': '5',
  'options': ('2', '4', '5', '10'),
  'reply': 'The correct answer is (B), 4.\n'
           '\n'
           '$\\overline{WTY}$ and $\\overline{TWY}$ are congruent chords of the same circle, so they have the same '
           'length. Therefore, $4x = -2x + 10$.\n'
           '\n'
           'Adding $2x$ to both sides gives $6x = 10$.\n'
           '\n'
           'Dividing both sides by 6 gives $x = \\boxed{4}$.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-285',
  'gold': '25°',
  'options': ('50°', '40°', '30°', '25°'),
  'reply': 'The answer is (C).\n'
           '\n'
           '* Given that AB is the diameter of ⊙O, so ∠BOC = 2∠BAC (angle at the center is twice the angle on the '
           'circumference)\n'
           '* ∠BOC = 50°, so ∠BAC = 50°/2 = 25°\n'
           '* In triangle OAB, ∠A = 180° - ∠BOC - ∠BAC = 180° - 50° - 25° = 105°\n'
           '\n'
           'Therefore, the degree of ∠A is 105°. So the correct choice is (C).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-290',
  'gold': '75°',
  'options': ('75°', '85°', '95°', '105°'),
  'reply': 'The correct answer is **(B)**.\n'
           '\n'
           '```\n'
           'Given: ∠1 = 105°\n'
           'AB || CD\n'
           '```\n'
           '\n'
           '* **Corresponding angles:** Angles that are in corresponding positions when two lines are cut by a '
           'transversal are equal.\n'
           '* **Alternate exterior angles:** Angles that are on opposite sides of the transversal and are outside '
           'the two lines are equal.\n'
           '\n'
           'In the figure, ∠1 and ∠2 are corresponding angles, so ∠2 = ∠1 = 105°.\n'
           '\n'
           'Therefore, the degree of ∠2 is **105°**.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-291',
  'gold': "May '21",
  'options': ("Jul '21", "Jun '21", "Mar '21", "May '21", "Apr '21"),
  'reply': "The answer is (E) Jun '21.\n"
           '\n'
           "The maximum number of full-time employees is 128 million in Jun '21, as shown by the highest point of "
           'the line graph in that month. The number of full-time employees decreases in the following months. So '
           'the answer is (E).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-292',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The correct answer is **(A) yes**.\n'
           '\n'
           'In the image, Rebecca Purple has a bar value of 80, while Olive Drab has a bar value of 60. Therefore, '
           'Rebecca Purple is greater than Olive Drab.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-296',
  'gold': 'equal to',
  'options': ('larger than', 'equal to', 'smaller than'),
  'reply': 'The correct answer is (C). The value of f(-3) is **smaller than** the value of f(2).\n'
           '\n'
           'In the graph, the line is a horizontal line at y = 3. This means that the function f(x) always outputs '
           'the value 3, regardless of the input x. Therefore, f(-3) = f(2) = 3. However, since -3 is less than 2, '
           'we can say that f(-3) is **smaller than** f(2).\n'
           '\n'
           'So the answer is (C).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-297',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The answer is **(B) No**.\n'
           '\n'
           'There is no green school bus in the image. The only school bus in the image is blue. So the number of '
           'blue school buses is greater than the number of green school buses, which is 0.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-312',
  'gold': 'apples',
  'options': ('potatoes', 'peas', 'apples', 'canola'),
  'reply': 'The answer is (A). Potatoes cost $9 per cwt in 2003, which is more than the price of peas ($7), apples '
           '($20), and canola ($10).\n'
           '\n'
           'Here is the table with the prices of the crops in 2003:\n'
           '\n'
           'Crop | Price per cwt\n'
           '------- | --------\n'
           'Peas | $7\n'
           'Potatoes | $9\n'
           'Apples | $20\n'
           'Canola | $10\n'
           '\n'
           'So the answer is (A). Potatoes cost the most per cwt in 2003.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-318',
  'gold': '2256',
  'options': ('191.5', '1128', '2256', '4512'),
  'reply': 'The correct answer is (B), 1128.\n'
           '\n'
           'The area of a trapezoid is given by the formula:\n'
           '\n'
           '```\n'
           'Area = (1/2) × (Base 1 + Base 2) × (Height)\n'
           '```\n'
           '\n'
           'In this case, the bases are 41 ft and 53 ft, and the height is 48 ft. Plugging these values into the '
           'formula, we get:\n'
           '\n'
           '```\n'
           'Area = (1/2) × (41 ft + 53 ft) × (48 ft) = 1128 ft²\n'
           '```\n'
           '\n'
           'To the nearest tenth, the area is 1128 ft².',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-324',
  'gold': '53',
  'options': None,
  'reply': 'The highest value of the dark blue bar is 81%, and the lowest value is 35%. So the difference between '
           'the highest and lowest value of the dark blue bar is 81 - 35 = **46%**.\n'
           '\n'
           'Do you have other questions or requests?',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-326',
  'gold': '3',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'I see the image. The pencil is about 5 inches long. The end of the pencil is aligned with the 5-inch '
           'mark on the ruler.\n'
           '\n'
           'So the answer is 5',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-331',
  'gold': '64',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'The mean is the average of a set of numbers. To find the mean, you add all the numbers and then divide '
           'by the number of numbers.\n'
           '\n'
           'In this case, there are 9 people and their number of web pages visited are: 84, 56, 70, 68, 60, 47, '
           '75, 52.\n'
           '\n'
           'The mean is: (84 + 56 + 70 + 68 + 60 + 47 + 75 + 52) / 9 = 63\n'
           '\n'
           'So the answer is 63',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-337',
  'gold': 'quarter',
  'options': ('half', 'quarter', "o'clock", 'quarter to', 'quarter past'),
  'reply': 'The time shown is 7:45. It is **quarter to eight**. So the answer is (D).\n'
           '\n'
           'The hour is 7. There are 15 minutes left before the next hour, which is 8. 15 minutes is a quarter of '
           'an hour. Therefore, it is quarter to eight.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-344',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The answer is (B) No.\n'
           '\n'
           'There are 3 metal cars to the left of the tiny matte school bus. There are 2 tiny cyan double buses.\n'
           '\n'
           'So the number of metal cars is less than the number of tiny cyan double buses.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-359',
  'gold': '-7',
  'options': None,
  'reply': 'The rate of change between Thursday and Friday is the difference in the number of shells found divided '
           'by the number of days between the two days. In this case, the difference is 7 - 0 = 7 shells. \r\n'
           '\r\n'
           'The number of days between Thursday and Friday is 1 day. \r\n'
           '\r\n'
           'Therefore, the rate of change is 7/1 = 7 shells per day.\r\n'
           '\r\n'
           'So the answer is 7',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-258',
  'gold': '2',
  'options': None,
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'Looking at the image, there are 6 bags that have at least 60 red buttons but fewer than 81 red '
           'buttons. They are the bags with 60, 61, 62, 63, 64, 65, and 66 red buttons.\n'
           '\n'
           'So the answer is 7',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-230',
  'gold': '0',
  'options': None,
  'reply': 'I see the image. There are 3 algorithms that have accuracy higher than 9 in at least one dataset. They '
           'are:\n'
           '\n'
           '* niece (accuracy of 9.5 on dataset 1)\n'
           '* pie (accuracy of 10 on dataset 2)\n'
           '* clergy (accuracy of 9.2 on dataset 3)\n'
           '\n'
           'So the answer to your question is 3.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-368',
  'gold': 'No',
  'options': ('Yes', 'No'),
  'reply': 'The answer is **(B) No**.\n'
           '\n'
           'There is only 1 yellow matte school bus in the image, while there are 2 big yellow metal cars.\n'
           '\n'
           'I cannot see any other yellow matte school buses in the image, so the number of yellow matte school '
           'buses cannot be greater than the number of big yellow metal cars.\n'
           '\n'
           'Is there anything else I can help you with?',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-369',
  'gold': 'Yes',
  'options': ('Yes', 'No'),
  'reply': 'The correct answer is **(A) Yes**.\n'
           '\n'
           'A function is surjective if for every element in the codomain, there exists at least one element in '
           'the domain that maps to it. In this case, the codomain is all real numbers, and the function maps '
           'every real number to a real number. Therefore, the function is surjective.\n'
           '\n'
           'The graph of the function shows that it passes through all real numbers except for the origin. '
           'However, the origin is not in the codomain, so the function does not need to map to it in order to be '
           'surjective.\n'
           '\n'
           'Therefore, the answer is (A).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-377',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The answer is **(B) no**.\n'
           '\n'
           'The median is the middle value in a sorted distribution. In this line graph, the values are sorted '
           'from lowest to highest, and there are 7 values. Therefore, the median is the 4th value. The 4th value '
           'is Medium Aqua, which is not Orange Red.\n'
           '\n'
           'Here is the sorted list of values in the line graph:\n'
           '\n'
           '* Medium Seafoam\n'
           '* Gray\n'
           '* Forest Green\n'
           '* Orchid\n'
           '* Khaki\n'
           '* Medium Aqua\n'
           '* Tomato\n'
           '* Orange Red\n'
           '\n'
           'Therefore, the answer is (B).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-386',
  'gold': '10 \\sqrt { 3 }',
  'options': ('5', '10', '10 \\sqrt { 3 }', '20'),
  'reply': 'The correct answer is (C).\n'
           '\n'
           'The triangle is a right triangle, where the hypotenuse is 20 and one of the shorter sides is 10. We '
           'can use the Pythagorean theorem to find the length of the other shorter side, which is x.\n'
           '\n'
           '```\n'
           'a^2 + b^2 = c^2\n'
           '```\n'
           '\n'
           '```\n'
           'x^2 + 10^2 = 20^2\n'
           '```\n'
           '\n'
           '```\n'
           'x^2 = 20^2 - 10^2\n'
           '```\n'
           '\n'
           '```\n'
           'x^2 = 400 - 100\n'
           '```\n'
           '\n'
           '```\n'
           'x^2 = 300\n'
           '```\n'
           '\n'
           '```\n'
           'x = \\sqrt{300} = 10\\sqrt{3}\n'
           '```\n'
           '\n'
           'Therefore, the value of x is 10√3. So the answer is (C).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-388',
  'gold': '0.42',
  'options': ('0.38', '0.42', '0.92', '2.40'),
  'reply': 'The tangent of angle M is the ratio of the opposite side to the adjacent side. In this triangle, the '
           'opposite side is 15 and the adjacent side is 36. Therefore, the tan M = 15/36 = 0.42. So the answer is '
           '(B).\n'
           '\n'
           'Here is the calculation in detail:\n'
           '\n'
           '```\n'
           'tan M = (opposite side)/(adjacent side) = 15/36 = 0.42\n'
           '```\n'
           '\n'
           'The nearest hundredth of 0.42 is 0.42. Therefore, the answer is (B).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-396',
  'gold': 'decrease',
  'options': ('remains the same', 'decrease', 'increase', 'NA'),
  'reply': 'The answer is (B). If all the algae dies, then the water flea population will **decrease**.\n'
           '\n'
           'The water flea is a herbivore, which means it eats algae. If there is no algae, then the water flea '
           'will have no food to eat and its population will decline.\n'
           '\n'
           'The other options are incorrect. Option (A) is incorrect because the water flea population will not '
           'remain the same if there is no algae to eat. Option (C) is incorrect because the water flea population '
           'will not increase if there is no algae to eat. Option (D) is incorrect because the question is asking '
           'about the water flea population, not the food web as a whole.\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-397',
  'gold': '2',
  'options': ('1', '2', '2.2', '2.5'),
  'reply': 'The answer is (B).\n'
           '\n'
           'From the diagram, we can see that ∠ACB is an inscribed angle that intercepts arc AB. Since arc AB is a '
           'semicircle, ∠ACB = 180°/2 = 90°.\n'
           '\n'
           'Also, ∠ACB is an angle in a semicircle, so it is a right angle. Therefore, triangle ACB is a right '
           'triangle.\n'
           '\n'
           'Since ∠ACB = 90°, then ∠CAB = 90° - 30° = 60°.\n'
           '\n'
           'Triangle ACB is a 30-60-90 triangle, so the ratio of the lengths of its sides is 1:√3:2.\n'
           '\n'
           'Let x be the length of side AC. Then, x = 1, so the length of side AB is 2x = 2.\n'
           '\n'
           'So the answer is (B).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-412',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The answer is (B) no.\n'
           '\n'
           'The black jacket costs $26 and the pair of shorts costs $11, for a total of $26 + $11 = $37. Tanner '
           'has $35, so he does not have enough money to buy both items.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-423',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The answer is **(B) no**.\n'
           '\n'
           'The image you sent me is a line graph showing the modulation transfer function (MTF) of various shades '
           'of pink. The MTF is a measure of the ability of a system to reproduce fine detail. A higher MTF means '
           'that the system can reproduce finer detail.\n'
           '\n'
           'The dark gray line in the graph has a higher MTF than the deep pink line. This means that dark gray '
           'can reproduce finer detail than deep pink. Therefore, deep pink is not less than dark gray.\n'
           '\n'
           'The correct option is therefore (B).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-430',
  'gold': 'smaller than',
  'options': ('larger than', 'equal to', 'smaller than'),
  'reply': 'The correct answer is (C). The derivative of f(x) at x=0 is smaller than that at x=5.\n'
           '\n'
           "The derivative of a function at a point gives the slope of the line tangent to the function's graph at "
           'that point. In the graph, the line tangent to the graph of f(x) at x=0 is flatter than the line '
           'tangent to the graph of f(x) at x=5. This means that the derivative of f(x) is smaller at x=0 than it '
           'is at x=5.\n'
           '\n'
           'In other words, the function is increasing more slowly at x=0 than it is at x=5. This is because the '
           'function is starting to level off at x=0, but it is still increasing at a significant rate at x=5.\n'
           '\n'
           'So the answer is (C).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-434',
  'gold': '60-k',
  'options': ('60-k', 'k', '60+k', '120-k', '120-2*k'),
  'reply': 'The correct answer is (A).\n'
           '\n'
           'Given that AC lies on line l, so angle BAC = 180 - (120 - k) = 60 + k.\n'
           'Also, angle BCA = 180 - 120 = 60.\n'
           'Hence, x + 60 + 60 + k = 180 --> x = 60 - k.\n'
           'So the answer is (A).',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-442',
  'gold': '3',
  'options': None,
  'reply': 'There are 3 objects that are preferred by more than 7 people in at least one category.\n'
           '\n'
           '* The object "satire" is preferred by 10 people in the "patch" category.\n'
           '* The object "dash" is preferred by 8 people in the "saloon" category.\n'
           '* The object "horn" is preferred by 9 people in the "racing" category.\n'
           '\n'
           'No other object is preferred by more than 7 people in any category. So the answer is 3.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-447',
  'gold': 'no',
  'options': ('yes', 'no'),
  'reply': 'The correct answer is (B). Midnight Blue does not intersect Purple in the scatter plot. The two colors '
           'are clearly separated by the Coral color.\r\n'
           '\r\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-375',
  'gold': '7',
  'options': ('1.5', '7', '11', '12.5'),
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'The triangle is isosceles, so $AB=AC$. We are given that $AB=9x-1$ and $AC=5x-0.5$. Since these two '
           'lengths are equal, we can set them equal to each other and solve for $x$.\n'
           '\n'
           '```\n'
           '9x-1 = 5x-0.5\n'
           '```\n'
           '\n'
           '```\n'
           '4x = 0.5\n'
           '```\n'
           '\n'
           '```\n'
           'x = 0.125\n'
           '```\n'
           '\n'
           'Therefore, the length of $AC$ is $5x-0.5 = 5(0.125)-0.5 = \\boxed{1.25}$.\n'
           '\n'
           'Here is a step-by-step solution:\n'
           '\n'
           '1. Since the triangle is isosceles, we know that $AB=AC$.\n'
           '2. We are given that $AB=9x-1$ and $AC=5x-0.5$.\n'
           '3. Setting these two equations equal to each other, we get $9x-1=5x-0.5$.\n'
           '4. Solving for $x$, we get $x=0.125$.\n'
           '5. Plugging this value of $x$ into the equation $AC=5x-0.5$, we get $AC=5(0.125)-0.5=\\boxed{1.25}$.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-378',
  'gold': '8',
  'options': ('5', '6', '7', '8'),
  'reply': 'The answer is (B).\n'
           '\n'
           'Since E is the midpoint of AD, which is the median of triangle ABC, then triangle ABE is equal in area '
           'to triangle ACD.\n'
           '\n'
           '* Area of triangle ABE = 2\n'
           '* Area of triangle ACD = 2\n'
           '\n'
           'The total area of triangle ABC is the sum of the areas of triangle ABE and triangle ACD.\n'
           '\n'
           '* Area of triangle ABC = 2 + 2 = 4\n'
           '\n'
           'So the answer is (B).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-383',
  'gold': '131253.5',
  'options': None,
  'reply': 'The largest bar value in the image is 262,507 thousand euros. If we divide this value by 2, we get '
           '131,253.5 thousand euros. Rounding to one decimal place, the answer is 131.3 thousand euros.\n'
           '\n'
           'So the answer is 131.3',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-389',
  'gold': 'shortage',
  'options': ('shortage', 'surplus'),
  'reply': 'The correct answer is **(B)**, surplus.\n'
           '\n'
           'At a price of $320, the quantity supplied is 12,500 units, while the quantity demanded is 20,000 '
           'units. This means that there are 7,500 more units supplied than demanded. So the answer is surplus.\n'
           '\n'
           'Here is a table summarizing the supply and demand at each price:\n'
           '\n'
           'Price | Quantity Supplied | Quantity Demanded | Surplus/Shortage\n'
           '------- | -------- | -------- | --------\n'
           '$270 | 10,600 | 20,200 | Shortage of 9,600\n'
           '$320 | 12,500 | 20,000 | Surplus of 7,500\n'
           '$370 | 14,400 | 19,800 | Surplus of 5,400\n'
           '$420 | 19,600 | 19,400 | No surplus or shortage\n'
           '$470 | 18,200 | 16,300 | Shortage of 1,900\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-394',
  'gold': 'LangRoom',
  'options': ('HomeGrid', 'Msgr S1', 'Msgr S2', 'Msgr S3', 'VLN', 'LangRoom'),
  'reply': 'The answer is **(B) Msgr S1**.\n'
           '\n'
           'According to the table, Msgr S1 has a training time of 16 GPU days, which is the least among all the '
           'environments. The other environments have training times of 3.75 GPU days (HomeGrid), 24 GPU days '
           '(Msgr S2), 24 GPU days (Msgr S3), 16 GPU days (VLN), and 2 GPU days (LangRoom).\n'
           '\n'
           'Here is a table summarizing the training time for each environment:\n'
           '\n'
           'Environment | Training time (GPU days)\n'
           '---|---\n'
           'HomeGrid | 3.75\n'
           'Msgr S1 | 16\n'
           'Msgr S2 | 24\n'
           'Msgr S3 | 24\n'
           'VLN | 16\n'
           'LangRoom | 2\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-408',
  'gold': '6 \\sqrt { 5 }',
  'options': ('6', '6 \\sqrt { 2 }', '6 \\sqrt { 3 }', '6 \\sqrt { 5 }'),
  'reply': 'The correct answer is **(B) 6√2**.\n'
           '\n'
           'The triangle is a right triangle with legs of length 3 and 12. The hypotenuse is z. We can use the '
           'Pythagorean Theorem to find z:\n'
           '\n'
           '```\n'
           '(hypotenuse)^2 = (leg 1)^2 + (leg 2)^2\n'
           '```\n'
           '\n'
           '```\n'
           'z^2 = 3^2 + 12^2\n'
           '```\n'
           '\n'
           '```\n'
           'z^2 = 9 + 144 = 153\n'
           '```\n'
           '\n'
           '```\n'
           'z = √153 = 6√2\n'
           '```\n'
           '\n'
           'Therefore, the value of z is 6√2. So the answer is (B).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-410',
  'gold': '20.25',
  'options': ('20.25', '21', '27', '36'),
  'reply': 'Since $\\triangle DEF \\sim \\triangle CBF$, we have $\\frac{DE}{CB} = \\frac{DF}{FC}$. Since $DE = 6$ '
           'and $FC = 8$, we have $\\frac{DE}{CB} = \\frac{6}{8} = \\frac{3}{4}$.\n'
           '\n'
           'The perimeter of $\\triangle CBF$ is $27$, so $CB + BF = 27$. Substituting $\\frac{3}{4}$ for '
           '$\\frac{CB}{BF}$, we get $\\frac{3}{4}BF + BF = 27$. Solving for $BF$, we get $BF = 12$.\n'
           '\n'
           'The perimeter of $\\triangle DEF$ is $DE + EF + DF = 6 + EF + 6 = EF + 12$. Substituting '
           '$\\frac{3}{4}$ for $\\frac{EF}{BF}$, we get $EF + 12 = \\frac{4}{3}EF$. Solving for $EF$, we get $EF = '
           '9$.\n'
           '\n'
           'Therefore, the perimeter of $\\triangle DEF$ is $EF + DE + DF = 9 + 6 + 6 = \\boxed{21}$.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-421',
  'gold': '-47',
  'options': None,
  'reply': 'The work done by the cable on the elevator is equal to the negative of the work done by gravity, since '
           'the cable is pulling upwards while gravity is pulling downwards. The work done by gravity is:\n'
           '\n'
           '```\n'
           'W_g = mgh = (500 \\mathrm{~kg})(9.8 \\mathrm{~m/s^2})(12 \\mathrm{~m}) = 5880 \\mathrm{~J}\n'
           '```\n'
           '\n'
           'So, the work done by the cable is:\n'
           '\n'
           '```\n'
           'W_T = -W_g = -5880 \\mathrm{~J} = \\boxed{-5880} \\mathrm{~J}\n'
           '```\n'
           '\n'
           'The negative sign means that the cable is doing work to slow down the elevator.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-425',
  'gold': '0.6',
  'options': ('0.6', '0.8', '0.75', '\\frac{4}{3}'),
  'reply': 'The correct answer is **(C) 0.75**.\n'
           '\n'
           '```\n'
           'Given: ∆ABC is a right triangle with ∠C = 90°, AC = 6, BC = 8\n'
           'AC is the opposite to ∠A, and BC is adjacent to ∠A.\n'
           'Hence, cosA = AC/BC = 6/8 = 0.75\n'
           '```\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-443',
  'gold': '\\frac{4}{5}',
  'options': ('\\frac{3}{5}', '\\frac{4}{5}', '\\frac{3}{4}', '\\frac{4}{3}'),
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'The correct answer is **(A) $\\frac{3}{5}$**.\n'
           '\n'
           'In a right triangle, the sine of an angle is equal to the ratio of the opposite side to the '
           'hypotenuse. In this case, the opposite side is AC = 8 and the hypotenuse is AB = 10. Therefore, sinB = '
           '8/10 = 3/5.\n'
           '\n'
           'Here is the detailed solution:\n'
           '\n'
           '```\n'
           'Given:\n'
           '* ∆ABC is a right triangle with right angle at C\n'
           '* AC = 8\n'
           '* AB = 10\n'
           '\n'
           'To find: sinB\n'
           '\n'
           'sinB = opposite/hypotenuse = AC/AB = 8/10 = 3/5\n'
           '```\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-455',
  'gold': '16*\\pi/5',
  'options': ('16*\\pi/5', '32*\\pi/5', '36*\\pi', '288*\\pi/5', '576*\\pi'),
  'reply': 'The correct answer is (B).\n'
           '\n'
           'The formula for the arc length of a circle is:\n'
           '\n'
           '```\n'
           'arc length = (theta)*r*pi\n'
           '```\n'
           '\n'
           'where:\n'
           '\n'
           '* `theta` is the central angle in radians\n'
           '* `r` is the radius of the circle\n'
           '* `pi` is the mathematical constant pi (approximately equal to 3.14)\n'
           '\n'
           'In this case, `theta` is equal to `x/2r`, which is equal to `32/(2*18) = 8/9` radians.\n'
           '\n'
           'Therefore, the arc length is equal to:\n'
           '\n'
           '```\n'
           '(8/9)*18*pi = 32*pi/5\n'
           '```\n'
           '\n'
           'So the answer is (B).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-464',
  'gold': '4',
  'options': ('1', '2', '3', '4', '5', '6'),
  'reply': 'The answer is (F).\n'
           '\n'
           'The image shows 6 equal fractions of a circle. The missing picture should also have 6 equal fractions. '
           'Of the choices, only option (F) has 6 equal fractions.\n'
           '\n'
           'The other choices have different number of fractions. Option (A) has 1 fraction, option (B) has 2 '
           'fractions, option (C) has 3 fractions, option (D) has 4 fractions, and option (E) has 5 fractions.\n'
           '\n'
           'Therefore, the correct answer is option (F).',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-459',
  'gold': '1',
  'options': None,
  'reply': 'There are 7 objects in the image.\n'
           '\n'
           'We need to subtract all large cyan matte balls and all tiny shiny objects.\n'
           '\n'
           'There are 3 large cyan matte balls.\n'
           'There are 2 tiny shiny objects.\n'
           '\n'
           'Therefore, we need to subtract 3 + 2 = 5 objects.\n'
           '\n'
           'Hence, there are 7 - 5 = 2 objects left.\n'
           '\n'
           'So the answer is 2',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-379',
  'gold': 'horses',
  'options': ('horses', 'cats', 'nothing', 'bears'),
  'reply': 'The answer is (D), bears.\n'
           '\n'
           'In the food web, the trees are the producers. The deer, rabbits, and horses are the primary consumers. '
           'The bears are the secondary consumers. If the trees are lost, the deer, rabbits, and horses will have '
           'no food to eat. This will lead to a decline in the population of these animals. The bears will also be '
           'affected, as they will have less food to eat.\n'
           '\n'
           'The cats are tertiary consumers, and they are not directly affected by the loss of the trees. However, '
           'they may be indirectly affected, as the decline in the population of deer, rabbits, and horses will '
           'lead to a decline in the population of their prey.\n'
           '\n'
           'So the answer is (D), bears.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathvista-364',
  'gold': '40°',
  'options': ('30°', '35°', '40°', '45°'),
  'reply': 'The correct answer is **(C)**.\n'
           '\n'
           'Angle ABD is inscribed in the circle, so its central angle is twice its measure. Therefore, the '
           'central angle ∠AOB is 2 * 50.0° = 100.0°.\n'
           '\n'
           'Since AB is a diameter, ∠AOB is a straight angle, so ∠BCD is 180.0° - 100.0° = 80.0°.\n'
           '\n'
           'Therefore, the degree of ∠BCD is **80°**.',
  'verdict': True,
  'clear_cut': False,
  'why': 'the answer statement names the right option (C), but the working ends on another value (80 deg / 105 '
         'deg): a grader reading the option says right, one reading the last value wrong'},
 {'id': 'mathvista-413',
  'gold': '40°',
  'options': ('25°', '35°', '40°', '45°'),
  'reply': 'Sure, I can help you with that.\n'
           '\n'
           'The answer is (C).\n'
           '\n'
           'Given that AB=AC, so triangle ABC is an isosceles triangle.\n'
           '\n'
           'Since BD is the bisector of ∠ABC, then ∠BDC = ∠DCB = 75/2 = 37.5°.\n'
           '\n'
           'The sum of the angles in triangle ABC is 180°, so ∠A = 180° - ∠BDC - ∠DCB = 180° - 37.5° - 37.5° = '
           '105°.\n'
           '\n'
           'Therefore, the degree of ∠A is 105°. So the answer is (C).\n'
           '\n'
           'I hope this helps! Let me know if you have any other questions.',
  'verdict': True,
  'clear_cut': False,
  'why': 'the answer statement names the right option (C), but the working ends on another value (80 deg / 105 '
         'deg): a grader reading the option says right, one reading the last value wrong'},
 {'id': 'mathvista-270',
  'gold': '100°',
  'options': ('50°', '65°', '100°', '130°'),
  'reply': 'The answer is (C). 100°.\n'
           '\n'
           'Given that AB = AC, so ∆ABC is an isosceles triangle.\n'
           'The angle bisector of an isosceles triangle divides the angle into two angles with equal measures.\n'
           'Therefore, ∠BAO = ∠CAO = 65/2 = 32.5°.\n'
           'Also, ∠BOC = ∠BAO + ∠CAO = 32.5° + 32.5° = 65°.\n'
           '\n'
           'Hence, the degree of ∠BOC is 65°. So the correct choice is (C).',
  'verdict': True,
  'clear_cut': False,
  'why': "'The answer is (C). 100 deg' (the gold) and 'the correct choice is (C)', but the working ends 'the "
         "degree of BOC is 65 deg': the option is right, the stated value is not"},
 {'id': 'mathvista-229',
  'gold': '0.30%',
  'options': ('0.33%', '0.31%', '0.29%', '0.32%', '0.30%'),
  'reply': 'The highest lysine level given is **0.30%** (A).\n'
           '\n'
           'The image shows the following text:\n'
           '\n'
           '```\n'
           'Lysine Levels (as examples only)\n'
           'Threonine Levels (as examples only)\n'
           '0.05%\n'
           '0.10%\n'
           '0.15%\n'
           '0.10%\n'
           '0.20%\n'
           '9 animals\n'
           '9 animals\n'
           '9 animals\n'
           '9 animals\n'
           '9 animals\n'
           '9 animals\n'
           '0.30%\n'
           '9 animals\n'
           '9 animals 9 animals\n'
           '```\n'
           '\n'
           'The only lysine level that is 0.30% is the third one, so the answer is (A).',
  'verdict': False,
  'clear_cut': False,
  'why': 'names the right value (0.30%) but the letter (A), which is 0.33%, twice: a grader reading the letter '
         'says wrong, one reading the value says right'},
 {'id': 'mathvista-333',
  'gold': '\\frac { 5 } { 12 }',
  'options': ('\\frac { 5 } { 12 }', '\\frac { 12 } { 13 }', '\\frac { 17 } { 12 }', '\\frac { 12 } { 5 }'),
  'reply': 'The correct answer is (D).\n'
           '\n'
           'In the triangle, the opposite side is 5 and the adjacent side is 12. Therefore, the tangent of the '
           'angle is 5/12.\n'
           '\n'
           '```\n'
           'tan X = \\frac{opposite}{adjacent} = \\frac{5}{12}\n'
           '```\n'
           '\n'
           'Choice (A), (B), and (C) are incorrect because they are not the tangent of the angle.',
  'verdict': False,
  'clear_cut': False,
  'why': "'The correct answer is (D)' (12/5), while the working gives 5/12 (the gold, option A)"},
 {'id': 'mathvista-59',
  'gold': '64°',
  'options': ('26°', '74°', '64°', '54°'),
  'reply': 'The answer is (D).\n'
           '\n'
           '* Since AB is a diameter, ∠AOB = 90°.\n'
           '* ∠ADC + ∠CAD = 180° (supplementary angles)\n'
           '* ∠CAD = 180° - 26° = 154°\n'
           '* ∠CAB = ∠CAD - ∠AOB = 154° - 90° = 64°\n'
           '\n'
           'Therefore, the degree of ∠CAB is 64°.',
  'verdict': False,
  'clear_cut': False,
  'why': "opens with 'The answer is (D)' (54 deg) but ends 'the degree of CAB is 64 deg' (the gold): a grader "
         'reading the first answer statement says wrong, one reading the last says right'},
 {'id': 'mathvista-44',
  'gold': '18',
  'options': None,
  'reply': 'The cost of 4 kilograms of oval beads is 4 * 2 = $8.\n'
           'The cost of 5 kilograms of star-shaped beads is 5 * 2 = $10.\n'
           'So the total cost is $8 + $10 = $18.\n'
           '\n'
           'Therefore, Chase will spend $18.\n'
           '\n'
           'I also wrote a Python code to calculate the total cost and got the same answer of 35.\n'
           '```python\n'
           'def calculate_cost(oval_beads, star_shaped_beads):\n'
           '  oval_bead_cost = 2\n'
           '  star_shaped_bead_cost = 2\n'
           '  total_cost = oval_beads * oval_bead_cost + star_shaped_beads * star_shaped_bead_cost\n'
           '  return total_cost\n'
           '\n'
           'print(calculate_cost(4, 5))\n'
           '```\n'
           '```\n'
           '35\n'
           '```\n'
           '\n'
           'Do you have other questions for me?',
  'verdict': True,
  'clear_cut': False,
  'why': "states 'Chase will spend $18' (the gold), then pastes code whose printed output is 35: the stated answer "
         'is right, a last-number grader takes 35'}]

MATHVERSE_TEMPLATE = [{'id': 'mathverse-3421',
  'gold': '14',
  'options': None,
  'reply': 'To find the length of the longest straw (L) that can fit into the can entirely, we need to use the '
           'Pythagorean theorem, as the straw forms the hypotenuse of a right-angled triangle, with the height of '
           'the can and the diameter of the base as the other two sides.\n'
           '\n'
           'The height (h) of the can is given as 13 cm, and the radius (r) as 3 cm. Therefore, the diameter (d) '
           'of the base of the can is twice the radius, or 6 cm.\n'
           '\n'
           'The length of the straw L is the hypotenuse of the right triangle, so we can calculate it using the '
           'Pythagorean theorem:\n'
           '\n'
           'L² = h² + d²\n'
           '\n'
           'Substituting the given values:\n'
           '\n'
           'L² = 13² + 6²\n'
           'L² = 169 + 36\n'
           'L² = 205\n'
           '\n'
           'Now we take the square root to find L:\n'
           '\n'
           'L = √205\n'
           '\n'
           "To ensure the straw fits entirely inside the can, we'll round down to the nearest whole centimeter:\n"
           '\n'
           'L ≈ √205 ≈ 14.32 (rounded down to the nearest whole centimeter gives us 14)\n'
           '\n'
           'So the length of the longest straw that can fit into the can, rounded down to the nearest cm, is 14 '
           'cm.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathverse-3422',
  'gold': '14',
  'options': None,
  'reply': 'To find the length of the longest straw (L) that can fit into the can, we must use the Pythagorean '
           "theorem for the right triangle within the can. The triangle's hypotenuse is the straw, the height of "
           'the can is one leg, and the diameter (which is twice the radius) is the other leg. \n'
           '\n'
           'Given that the radius (r) is 3 cm, the diameter (d) will be 2 * r, which equals 6 cm. The height (h) '
           'of the can is already given as 13 cm. Now, we apply the Pythagorean theorem:\n'
           '\n'
           '\\[ L^2 = h^2 + d^2 \\]\n'
           '\\[ L^2 = 13^2 + 6^2 \\]\n'
           '\\[ L^2 = 169 + 36 \\]\n'
           '\\[ L^2 = 205 \\]\n'
           '\\[ L = \\sqrt{205} \\]\n'
           '\n'
           'Now, we calculate the square root of 205.\n'
           '\n'
           '\\[ L ≈ 14.32 \\, cm \\]\n'
           '\n'
           'Since we want to ensure the straw fits inside the can, we round down to the nearest whole cm:\n'
           '\n'
           '\\[ L ≈ 14 \\, cm \\]\n'
           '\n'
           'Therefore, the length of the longest straw that can fit into the can, rounded down to the nearest cm, '
           'is:\n'
           '\n'
           '14',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathverse-3423',
  'gold': '14',
  'options': None,
  'reply': 'To find the length of the longest straw, L, that can fit into the can, we must identify the longest '
           'straight line that can be drawn inside the cylinder. This would be the diagonal of the cylindrical '
           'shape, going from the bottom of one side to the top of the other. This forms a right-angle triangle '
           'with the height of the cylinder and the diameter of its base.\n'
           '\n'
           'From the image, we see the height of the cylinder is 13 cm. Because the radius of the cylinder is '
           'given as 3 cm, the diameter would be 2 times the radius, thus 6 cm.\n'
           '\n'
           'Applying the Pythagorean theorem to the triangle formed, where L is the hypotenuse, the height is one '
           'side (13 cm), and the diameter is the other side (6 cm), the equation would be:\n'
           '\n'
           'L^2 = 13^2 + 6^2\n'
           'L^2 = 169 + 36\n'
           'L^2 = 205\n'
           '\n'
           'Taking the square root of both sides:\n'
           '\n'
           'L = √205\n'
           '\n'
           'Calculating the square root gives us:\n'
           '\n'
           'L ≈ 14.32 cm\n'
           '\n'
           'Since the question requests the answer to be rounded down to the nearest cm to ensure it fits inside '
           'the can, we would round 14.32 cm down to:\n'
           '\n'
           'L = 14 cm\n'
           '\n'
           'Final answer: 14',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathverse-3424',
  'gold': '14',
  'options': None,
  'reply': 'To find the length of the longest straw that can fit into the can, we can use the Pythagorean theorem. '
           'The straw length (L) will be the hypotenuse of a right-angled triangle with the base equal to the '
           'diameter of the can and the height equal to the height of the can. The diameter is twice the radius, '
           'so in this case it would be 2 x 3 cm = 6 cm. The height of the can is 13 cm.\n'
           '\n'
           'Applying the Pythagorean theorem:\n'
           '\\( L^2 = 6^2 + 13^2 \\)\n'
           '\\( L^2 = 36 + 169 \\)\n'
           '\\( L^2 = 205 \\)\n'
           '\n'
           'Taking the square root to find L:\n'
           '\\( L = \\sqrt{205} \\)\n'
           '\n'
           'To the nearest cm, L would then be rounded down:\n'
           '\\( L \\approx 14.32 \\) (rounded down to the nearest cm results in 14)\n'
           '\n'
           'Therefore, the longest straw that can fit into the can, rounded down to the nearest cm to ensure it '
           'fits, is 14 cm.',
  'verdict': True,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathverse-3425',
  'gold': '14',
  'options': None,
  'reply': 'To find the length of the longest straw (L) that can fit into the can, we need to use the Pythagorean '
           'theorem. This is because the longest straw will fit exactly across the diagonal of the cylinder, from '
           'one corner of the base to the opposite corner at the top.\n'
           '\n'
           'From the given image, the diameter (D) of the can is 3 cm, which means the radius (r) is 1.5 cm. The '
           'height (H) of the can is 13 cm.\n'
           '\n'
           "The diagonal of the cylinder's base is the hypotenuse of a right triangle where the two other sides "
           "are the radii of the cylinder's base. Therefore, the length of the diagonal across the base, using the "
           'Pythagorean theorem, is:\n'
           '\n'
           'Diagonal of base = √(r² + r²)\n'
           '                 = √(1.5² + 1.5²)\n'
           '                 = √(2.25 + 2.25)\n'
           '                 = √4.5\n'
           '                 = 2.12132 cm (approximately)\n'
           '\n'
           'Now, we find the longest straw length, L, which is the hypotenuse of another right triangle formed by '
           'the height of the cylinder and the diagonal of the base:\n'
           '\n'
           'L = √(Height² + Diagonal²)\n'
           '  = √(13² + 2.12132²)\n'
           '  = √(169 + 4.5)\n'
           '  = √173.5\n'
           '  = 13.17208 cm (approximately)\n'
           '\n'
           'The question asks for the answer to be rounded down to the nearest centimeter. Therefore:\n'
           '\n'
           'L ≈ 13 cm\n'
           '\n'
           'So the length of the longest straw that can fit into the can, rounded down to the nearest centimeter, '
           'is 13 cm.',
  'verdict': False,
  'clear_cut': True,
  'why': ''},
 {'id': 'mathverse-685',
  'gold': '14',
  'options': None,
  'reply': "First, we must realize that the longest straw that can fit inside the can will fit along the can's "
           'diagonal when viewed from the side. This diagonal would span from the bottom center of the circular '
           'base of the can, through the center of the circle, and to the top edge of the can.\n'
           '\n'
           'To find the length of this diagonal, L, we can use the Pythagorean theorem. This theorem states that '
           'in a right-angle triangle, the square of the length of the hypotenuse (the side opposite the right '
           'angle) is equal to the sum of the squares of the lengths of the other two sides.\n'
           '\n'
           'Here, the height of the can (13 cm) and the diameter of the base (twice the radius, so 2 x 3 cm = 6 '
           'cm) are the two sides of a right-angled triangle, and the diagonal (L) is the hypotenuse.\n'
           '\n'
           'Using the Pythagorean theorem:\n'
           'L² = height² + radius²\n'
           'L² = 13² + 6²\n'
           'L² = 169 + 36\n'
           'L² = 205\n'
           'L = √205\n'
           'L ≈ 14.32\n'
           '\n'
           'Therefore, the length of the longest straw that can fit into the can, when rounded down to the nearest '
           'cm to ensure it fits inside the can, would be 14 cm.',
  'verdict': True,
  'clear_cut': True,
  'why': ''}]
